"""The reconciler's decisions on the real caches and the in-memory writer seam (``ApiWrites``).

Aspects covered: a new domain gets its finalizer in one round with its workload template and
(driver-managed) its daemon template and DaemonSet, then its status beside the daemons'
NetworkPolicy; a refused domain gets its finalizer and a status only; a second reconcile sees the
first's writes and creates nothing again; host-managed makes the workload template only; an API
error surfaces as a ``ReconcileFailed`` event and is raised for the work queue to judge.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest

from imexdra.api.computedomain import ComputeDomain, ComputeDomainStatus, ComputeDomainStatusValue
from imexdra.api.constants import daemon_object_name
from imexdra.common.errors import PermanentError, RetryableError
from imexdra.common.machinery.store import object_key
from imexdra.controller import reasons, render
from imexdra.controller.caches import Caches
from imexdra.controller.metrics import DomainStatusMetrics
from imexdra.controller.netpolicy import DaemonPolicies
from imexdra.controller.placement import home_of
from imexdra.controller.reconciler import Reconciler
from imexdra.controller.writes import has_finalizer
from tests.support.apiwrites import FakeWrites
from tests.support.offline import offline_client
from tests.unit.controller.support import Events, fake_writes, make_config, make_domain


@dataclass
class World:
    caches: Caches
    writes: FakeWrites
    events: Events
    reconciler: Reconciler
    key: str


async def _world(tmp_path: Path, **config: Any) -> AsyncIterator[World]:
    client = offline_client(tmp_path)
    cfg = make_config(**config)
    caches = Caches(client, cfg)
    cd: ComputeDomain = make_domain()
    assert cd.metadata is not None
    cd.metadata.resourceVersion = "1"
    caches.domains.store.upsert(cd)
    writes, events = fake_writes(caches), Events()
    reconciler = Reconciler(cfg, caches, writes, events, DomainStatusMetrics())  # type: ignore[arg-type]
    yield World(caches, writes, events, reconciler, object_key(cd))
    client.close()


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    """A driver-managed controller's caches holding one new domain."""
    async for w in _world(tmp_path):
        yield w


async def test_a_new_domain_gets_its_finalizer_with_its_objects_and_before_its_status(world: World) -> None:
    """The finalizer is written in the round that creates the objects, and the status only after both:
    a status never speaks for a domain whose deletion the controller would not see through."""
    await world.reconciler.reconcile(world.key)
    verbs = world.writes.verbs()
    assert sorted(verbs[: verbs.index("write_status")]) == ["add_finalizer", "create", "create", "create"]
    cd = world.caches.domain_view.get(world.key)
    assert cd is not None and has_finalizer(cd)


async def test_a_refused_domain_gets_its_finalizer_before_its_status_and_no_objects(world: World) -> None:
    """A domain refused (here: it records a channel, made under channel isolation, which the driver no
    longer runs): the finalizer, then its status saying why, and nothing else."""
    cd = world.caches.domain_view.get(world.key)
    assert cd is not None
    status = ComputeDomainStatus(status=ComputeDomainStatusValue.NOT_READY, channel=3)
    world.caches.domains.store.upsert(msgspec.structs.replace(cd, status=status))
    await world.reconciler.reconcile(world.key)
    assert world.writes.verbs() == ["add_finalizer", "write_status"]
    assert world.events.reasons() == [reasons.ISOLATION_MISMATCH]


async def test_driver_managed_creates_templates_and_daemonset(world: World) -> None:
    """Driver-managed: the workload template, the daemon template and the DaemonSet are created."""
    await world.reconciler.reconcile(world.key)
    created = [key for verb, key in world.writes.log if verb == "create"]
    uid = render.domain_uid(make_domain())
    daemon = f"nvidia-dra/{daemon_object_name(uid)}"
    assert sorted(created) == sorted(
        [f"team-a/{render.workload_template_name(make_domain())}", daemon, daemon]
    )


async def test_the_daemons_policy_follows_the_daemonset_in_the_status_round(tmp_path: Path) -> None:
    """The daemons' NetworkPolicy is created after the DaemonSet it names as owner, beside the status
    write rather than before it, in the same first reconcile."""
    client = offline_client(tmp_path)
    cfg = make_config()
    caches = Caches(client, cfg)
    caches.domains.store.upsert(make_domain())
    policies = DaemonPolicies(client, cfg)
    writes = fake_writes(caches)
    reconciler = Reconciler(
        cfg,
        caches,
        writes,
        Events(),
        DomainStatusMetrics(),
        policies=policies,  # type: ignore[arg-type]
    )
    await reconciler.reconcile(object_key(make_domain()))
    uid = render.domain_uid(make_domain())
    daemon = f"nvidia-dra/{daemon_object_name(uid)}"
    daemon_creates = [i for i, (verb, key) in enumerate(writes.log) if (verb, key) == ("create", daemon)]
    assert len(daemon_creates) == 3  # the daemon template and the DaemonSet, then the policy
    assert daemon_creates[1] < writes.verbs().index("write_status")
    (policy,) = policies.view.by_domain(uid)
    (ds,) = caches.daemon_sets_of(home_of(make_domain()))
    assert policy.metadata.ownerReferences[0].uid == ds.metadata.uid
    client.close()


async def test_a_second_reconcile_sees_the_first_writes(world: World) -> None:
    """The writes landed in the stores: a second reconcile creates nothing again."""
    await world.reconciler.reconcile(world.key)
    world.writes.log.clear()
    await world.reconciler.reconcile(world.key)
    assert "create" not in world.writes.verbs()
    assert "add_finalizer" not in world.writes.verbs()


async def test_an_api_error_is_an_event_and_raised(world: World) -> None:
    """A failed write surfaces as a ReconcileFailed event and is raised for the work queue; a 403 is
    raised retryable (the controller retries authorization failures), a 422 permanent."""
    world.writes.fail("add_finalizer", 403)
    with pytest.raises(RetryableError):
        await world.reconciler.reconcile(world.key)
    world.writes.fail("add_finalizer", 422)
    with pytest.raises(PermanentError):
        await world.reconciler.reconcile(world.key)
    assert world.events.reasons() == [reasons.RECONCILE_FAILED] * 2
    assert "write_status" not in world.writes.verbs()  # no status for a domain without its finalizer


async def test_host_managed_makes_the_workload_template_only(tmp_path: Path) -> None:
    """HostManagedIMEX: one create, the workload template; no daemon objects."""
    async for world in _world(tmp_path, gates="HostManagedIMEX=true"):
        await world.reconciler.reconcile(world.key)
        created = [key for verb, key in world.writes.log if verb == "create"]
        assert len(created) == 1 and created[0].startswith("team-a/")
