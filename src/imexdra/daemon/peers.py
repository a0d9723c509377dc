"""Learning peers: watch the one object the controller publishes membership in.

With ``ComputeDomainCliques`` on (the default) that is the clique ``<CD UID>.<clique ID>`` in the pod's
(driver) namespace; otherwise the ComputeDomain itself (``status.nodes``) in its own namespace. Either
way the informer watches a single object by field selector, and every change is turned into a
``Membership`` and published into a ``Latest`` box; consumers only ever see the newest membership,
so a burst of updates costs one reconfiguration. Objects of another ComputeDomain (a clique labelled
for another UID, a recreated ComputeDomain with a new UID) are ignored with a warning.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Generic, TypeVar

import structlog

from imexdra.api.computedomain import ComputeDomain
from imexdra.api.computedomainclique import ComputeDomainClique, clique_name
from imexdra.common.kube.api import KubeApi
from imexdra.common.machinery.informer import EventHandler, Informer
from imexdra.common.machinery.store import KubeObject
from imexdra.daemon.membership import (
    Identity,
    Membership,
    belongs_to,
    membership_from_clique,
    membership_from_compute_domain,
)

T = TypeVar("T")
K = TypeVar("K", bound=KubeObject)

_log = structlog.get_logger(__name__)

#: Upstream's daemon informers resync every 4 minutes (a level-triggered safety net).
RESYNC_PERIOD = 240.0


class Latest(Generic[T]):
    """The newest value of something, and a way to wait for a newer one."""

    def __init__(self) -> None:
        """Start empty (version 0)."""
        self._value: T | None = None
        self._version = 0
        self._changed = asyncio.Event()

    def publish(self, value: T) -> None:
        """Make ``value`` the newest, unless it equals the current one."""
        if self._version and value == self._value:
            return
        self._value = value
        self._version += 1
        self._changed.set()

    def current(self) -> tuple[int, T | None]:
        """The newest version and value, without waiting (version 0, None: nothing published yet)."""
        return self._version, self._value

    async def next(self, seen: int) -> tuple[int, T]:
        """Wait for a value newer than version ``seen``; return its version and the value."""
        while self._version == seen or self._value is None:
            self._changed.clear()
            await self._changed.wait()
        return self._version, self._value


class MembershipWatcher(Generic[K]):
    """Watches one object and publishes the membership derived from it."""

    def __init__(
        self,
        informer: Informer[K],
        *,
        name: str,
        namespace: str,
        accept: Callable[[K], bool],
        derive: Callable[[K | None], Membership],
    ) -> None:
        """Publish ``derive(object)`` on each change of ``namespace/name`` that ``accept`` takes."""
        self.informer = informer
        self.memberships: Latest[Membership] = Latest()
        self._name, self._namespace = name, namespace
        self._accept, self._derive = accept, derive
        informer.add_handler(
            EventHandler(
                on_add=lambda _obj: self._changed(),
                on_update=lambda _old, _new: self._changed(),
                on_delete=lambda _obj: self._changed(),
            )
        )

    def _changed(self) -> None:
        obj = self.informer.store.get_by_name(self._name, self._namespace)
        if obj is not None and not self._accept(obj):
            _log.warning(
                "Ignoring an object of another ComputeDomain", name=self._name, namespace=self._namespace
            )
            return
        self.memberships.publish(self._derive(obj))

    async def run(self) -> None:
        """List and watch until cancelled."""
        await self.informer.run()


def watch_clique(client: KubeApi, me: Identity, *, namespace: str) -> MembershipWatcher[ComputeDomainClique]:
    """Membership from this daemon's ComputeDomainClique."""
    name = clique_name(me.compute_domain_uid, me.clique_id)
    informer = Informer(
        client,
        ComputeDomainClique,
        namespace=namespace,
        field_selector=f"metadata.name={name}",
        resync_period=RESYNC_PERIOD,
    )
    return MembershipWatcher(
        informer,
        name=name,
        namespace=namespace,
        accept=lambda clique: belongs_to(clique.metadata.labels if clique.metadata else None, me),
        derive=lambda clique: membership_from_clique(clique, me),
    )


def watch_compute_domain(
    client: KubeApi, me: Identity, *, name: str, namespace: str
) -> MembershipWatcher[ComputeDomain]:
    """Membership from the ComputeDomain's ``status.nodes`` (gate ``ComputeDomainCliques`` off)."""
    informer = Informer(
        client,
        ComputeDomain,
        namespace=namespace,
        field_selector=f"metadata.name={name}",
        resync_period=RESYNC_PERIOD,
    )
    return MembershipWatcher(
        informer,
        name=name,
        namespace=namespace,
        accept=lambda cd: cd.metadata is not None and cd.metadata.uid == me.compute_domain_uid,
        derive=lambda cd: membership_from_compute_domain(cd, me),
    )
