"""Latest-value publishing and the membership watcher's filtering (informer stubbed at its store).

On looptime's virtual clock: the windows in which nothing may arrive cost no real time.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from imexdra.api.computedomainclique import ComputeDomainClique, ComputeDomainDaemonInfo
from imexdra.api.constants import COMPUTE_DOMAIN_LABEL_KEY
from imexdra.common.kube.models.meta_v1 import ObjectMeta
from imexdra.common.machinery.informer import EventHandler
from imexdra.common.machinery.store import Store
from imexdra.daemon.membership import Identity, Membership, belongs_to, membership_from_clique
from imexdra.daemon.peers import Latest, MembershipWatcher
from tests.support.waiting import stays_true

pytestmark = pytest.mark.looptime

ME = Identity(node_name="node-a", pod_ip="10.0.0.1", clique_id="u.1", compute_domain_uid="cd-uid")
NAME = "cd-uid.u.1"


class StubInformer:
    """Just the store and handler registration of an informer."""

    def __init__(self) -> None:
        self.store: Store[ComputeDomainClique] = Store()
        self.handlers: list[EventHandler[Any]] = []

    def add_handler(self, handler: EventHandler[Any]) -> None:
        self.handlers.append(handler)

    def put(self, clique: ComputeDomainClique) -> None:
        self.store.upsert(clique)
        for handler in self.handlers:
            assert handler.on_update is not None
            handler.on_update(clique, clique)


def clique(uid: str, *nodes: tuple[str, str, int]) -> ComputeDomainClique:
    return ComputeDomainClique(
        metadata=ObjectMeta(name=NAME, namespace="driver", labels={COMPUTE_DOMAIN_LABEL_KEY: uid}),
        daemons=[
            ComputeDomainDaemonInfo(node_name=n, ip_address=ip, clique_id="u.1", index=i)
            for n, ip, i in nodes
        ],
    )


async def test_latest_skips_equal_values_and_returns_newest() -> None:
    """Equal publishes are dropped; a waiter sees only the newest of a burst."""
    box: Latest[int] = Latest()
    box.publish(1)
    version, value = await box.next(0)
    assert (version, value) == (1, 1)
    box.publish(1)
    waiter = asyncio.create_task(box.next(version))
    await stays_true("an equal value wakes no waiter", lambda: not waiter.done(), for_seconds=1.0)
    box.publish(2)
    box.publish(3)
    assert await waiter == (3, 3)


async def test_watcher_publishes_membership_of_own_domain_only() -> None:
    """Clique changes become memberships; a clique labelled for another domain is ignored."""
    informer = StubInformer()
    watcher = MembershipWatcher(
        informer,  # type: ignore[arg-type]
        name=NAME,
        namespace="driver",
        accept=lambda c: belongs_to(c.metadata.labels if c.metadata else None, ME),
        derive=lambda c: membership_from_clique(c, ME),
    )
    informer.put(clique("cd-uid", ("node-a", "10.0.0.1", 0)))
    version, membership = await asyncio.wait_for(watcher.memberships.next(0), 1)
    assert membership.own is not None and membership.own.index == 0
    informer.put(clique("another-uid", ("node-a", "10.0.0.1", 5)))
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(watcher.memberships.next(version), 0.05)
    informer.put(clique("cd-uid", ("node-a", "10.0.0.1", 0), ("node-b", "10.0.0.2", 1)))
    _, membership = await asyncio.wait_for(watcher.memberships.next(version), 1)
    assert isinstance(membership, Membership) and len(membership.peers) == 2
