"""When the membership sync writes a domain's cliques and status (docs/architecture.md §5.1).

The sync runs against stand-ins of what it reads and writes: caches holding daemon pods and cliques,
and a writer that applies each write to them and counts it. A manual clock replaces time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec
import pytest

from imexdra.api.computedomain import ComputeDomain, ComputeDomainStatus
from imexdra.api.computedomainclique import ComputeDomainClique, ComputeDomainDaemonInfo
from imexdra.api.constants import ComputeDomainStatusValue
from imexdra.controller.config import ControllerConfig
from imexdra.controller.daemons import DaemonPod
from imexdra.controller.metrics import DomainStatusMetrics
from imexdra.controller.placement import Home
from imexdra.controller.sync import MembershipSync
from tests.unit.controller.support import UID, make_config, make_domain, member

READY = ComputeDomainStatusValue.READY
NOT_READY = ComputeDomainStatusValue.NOT_READY


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


@dataclass
class Harness:
    sync: MembershipSync
    caches: Caches
    writer: Writer
    clock: Clock
    config: ControllerConfig

    async def step(self) -> float | None:
        """One pass of the sync over the domain as last written; returns the requeue it asks for."""
        self.writer.log.clear()
        return await self.sync.sync(self.writer.domain)

    def status_nodes(self) -> dict[str, ComputeDomainStatusValue]:
        status = self.writer.domain.status
        return {n.name: n.status for n in status.nodes} if status else {}


@pytest.fixture
def harness() -> Harness:
    config = make_config()
    caches = Caches()
    domain = make_domain()
    assert domain.metadata is not None and domain.spec is not None
    domain.metadata.uid = UID
    domain.spec.num_nodes = 3
    writer = Writer(caches, domain)
    clock = Clock()
    sync = MembershipSync(
        config,
        caches,  # type: ignore[arg-type]
        writer,  # type: ignore[arg-type]
        events=_NoEvents(),  # type: ignore[arg-type]
        metrics=DomainStatusMetrics(),
        clock=clock,
    )
    return Harness(sync, caches, writer, clock, config)


class _NoEvents:
    def record(self, *_: Any, **__: Any) -> None:
        pass


async def test_a_fabric_node_joining_goes_out_in_its_clique_and_the_status_follows_on_the_rollup(
    harness: Harness,
) -> None:
    """The first status is written at once; a later join of a fabric node is written to its clique at
    once and to the status only when the roll-up interval since the last status write has passed."""
    harness.caches.pods = [member("a", ready=False)]
    assert await harness.step() is None
    assert harness.writer.log == ["clique", "status"]

    harness.clock.now += harness.config.min_publish_interval
    harness.caches.pods.append(member("b", ready=False))
    delay = await harness.step()
    assert harness.writer.log == ["clique"]
    rollup = harness.config.status_rollup_interval
    assert delay is not None and delay == pytest.approx(rollup - harness.config.min_publish_interval)
    assert list(harness.status_nodes()) == ["a"]

    harness.clock.now += delay
    assert await harness.step() is None
    assert harness.writer.log == ["status"]
    assert list(harness.status_nodes()) == ["a", "b"]


async def test_a_change_of_the_global_status_is_never_held_back(harness: Harness) -> None:
    """The last daemon turning Ready makes the domain Ready: clique and status go out in one pass."""
    harness.caches.pods = [member(n, ready=False) for n in "abc"]
    await harness.step()
    harness.clock.now += harness.config.min_publish_interval
    harness.caches.pods = [member(n, ready=True) for n in "abc"]
    assert await harness.step() is None
    assert harness.writer.log == ["clique", "status"]
    status = harness.writer.domain.status
    assert status is not None and status.status is READY


async def test_a_non_fabric_nodes_entry_is_never_held_back(harness: Harness) -> None:
    """A node without a clique is ready only by ``status.nodes``: its entry is written at once."""
    harness.caches.pods = [member("a", ready=False)]
    await harness.step()
    harness.clock.now += harness.config.min_publish_interval
    harness.caches.pods.append(member("z", clique="", ready=False))
    assert await harness.step() is None
    assert harness.writer.log == ["status"]
    assert harness.status_nodes() == {"a": NOT_READY, "z": NOT_READY}
