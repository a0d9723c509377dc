"""In-memory stand-ins of what the membership sync reads and writes, for its and the health tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from imexdra.api.computedomain import ComputeDomain, ComputeDomainStatus
from imexdra.api.computedomainclique import ComputeDomainClique, ComputeDomainDaemonInfo
from imexdra.controller.daemons import DaemonPod
from imexdra.controller.placement import Home
from tests.unit.controller.support import UID


@dataclass
class View:
    """A cache view: every object it holds belongs to the one domain under test."""

    objects: list[Any] = field(default_factory=list)

    def by_domain(self, uid: str) -> list[Any]:
        return list(self.objects) if uid == UID else []


@dataclass
class Caches:
    """What the sync reads: the domain's daemon pods and its cliques."""

    pods: list[DaemonPod] = field(default_factory=list)
    clique_view: View = field(default_factory=View)
    node_view: View = field(default_factory=View)
    daemon_set_view: View = field(default_factory=View)
    domain_view: View = field(default_factory=View)

    def daemon_pods(self, uid: str) -> list[DaemonPod]:
        return list(self.pods) if uid == UID else []

    def cliques_of(self, home: Home) -> list[Any]:
        return self.clique_view.by_domain(home.uid)

    def daemon_sets_of(self, home: Home) -> list[Any]:
        return self.daemon_set_view.by_domain(home.uid)


@dataclass
class Writer:
    """Applies the sync's writes to the caches and the domain, and logs them by kind."""

    caches: Caches
    domain: ComputeDomain
    log: list[str] = field(default_factory=list)

    async def create(self, obj: ComputeDomainClique, _view: View) -> ComputeDomainClique:
        self.caches.clique_view.objects.append(obj)
        self.log.append("clique")
        return obj

    async def merge_patch(
        self, obj: ComputeDomainClique, patch: dict[str, Any], _view: View
    ) -> ComputeDomainClique:
        daemons = msgspec.convert(patch["daemons"] or [], list[ComputeDomainDaemonInfo])
        patched = msgspec.structs.replace(obj, daemons=daemons)
        objects = self.caches.clique_view.objects
        objects[objects.index(obj)] = patched
        self.log.append("clique")
        return patched

    async def write_status(
        self, cd: ComputeDomain, status: ComputeDomainStatus, _view: Any, **_: Any
    ) -> None:
        self.domain = msgspec.structs.replace(cd, status=status)
        self.log.append("status")


class Clock:
    """Monotonic time that moves only when the test says so."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now
