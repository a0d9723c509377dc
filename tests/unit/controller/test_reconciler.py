"""The reconciler's decisions about a domain's objects, on the controller's real caches (docs/tenancy.md).

The caches are the controller's own (``Caches``: informer stores and overlays), filled by hand instead
of by a watch; the writer and the event recorder are stand-ins that record what the reconciler asks
for. Aspects covered: a look-alike (a template of another namespace carrying the domain's label and a
finalizer of its tenant's) is never written, does not count as the domain's workload template, and
gets one ``LabelIgnored`` event naming nothing of the domain's namespace; the domain's teardown deletes
its own objects only and does not wait on the look-alike.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from imexdra.api.computedomain import ComputeDomain
from imexdra.api.constants import COMPUTE_DOMAIN_FINALIZER, daemon_object_name
from imexdra.common.kube.models.meta_v1 import ObjectMeta
from imexdra.common.machinery.store import object_key
from imexdra.controller import reasons, render
from imexdra.controller.caches import Caches, DaemonSetMeta
from imexdra.controller.config import ControllerConfig
from imexdra.controller.metrics import DomainStatusMetrics
from imexdra.controller.reconciler import Reconciler
from tests.support.apiwrites import FakeWrites
from tests.support.offline import offline_client
from tests.unit.controller.support import UID, Events, fake_writes, make_config, make_domain

DRIVER_NAMESPACE = "nvidia-dra"
TENANT = "tenant"
TENANT_HOLD = "tenant.example.com/hold"


@dataclass
class Setup:
    caches: Caches
    writes: FakeWrites
    events: Events
    reconciler: Reconciler
    domain: ComputeDomain


def _meta(name: str, namespace: str, *, finalizers: list[str], uid: str) -> ObjectMeta:
    return ObjectMeta(
        name=name,
        namespace=namespace,
        uid=uid,
        resourceVersion="1",
        labels={"resource.nvidia.com/computeDomain": UID},
        finalizers=finalizers,
    )


def _lookalike(cd: ComputeDomain) -> Any:
    """A template of the tenant's namespace dressed as the domain's workload template."""
    template = render.workload_claim_template(cd)
    assert template.metadata is not None and template.metadata.labels is not None
    template.metadata = ObjectMeta(
        name="lookalike",
        namespace=TENANT,
        uid="lookalike-uid",
        resourceVersion="1",
        labels=dict(template.metadata.labels),
        finalizers=[TENANT_HOLD],
    )
    return template


def _domain_objects(cd: ComputeDomain, config: ControllerConfig) -> list[Any]:
    """The domain's own templates and DaemonSet, where the controller puts them."""
    workload = render.workload_claim_template(cd)
    assert workload.metadata is not None
    workload.metadata.uid, workload.metadata.resourceVersion = "wl-uid", "1"
    daemon = render.daemon_claim_template(UID, config.driver_namespace)
    assert daemon.metadata is not None
    daemon.metadata.uid, daemon.metadata.resourceVersion = "dt-uid", "1"
    name = daemon_object_name(UID)
    daemon_set = DaemonSetMeta(
        metadata=_meta(name, config.driver_namespace, finalizers=[COMPUTE_DOMAIN_FINALIZER], uid="ds-uid")
    )
    return [workload, daemon, daemon_set]


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[Setup]:
    """Caches holding a domain of team-a, its own objects, and a tenant's look-alike of its template."""
    client = offline_client(tmp_path)
    config = make_config(namespace=DRIVER_NAMESPACE)
    caches = Caches(client, config)
    cd = make_domain(name="victim", namespace="team-a", uid=UID)
    assert cd.metadata is not None
    cd.metadata.finalizers = [COMPUTE_DOMAIN_FINALIZER]
    cd.metadata.resourceVersion = "1"
    caches.domains.store.upsert(cd)
    workload, daemon, daemon_set = _domain_objects(cd, config)
    caches.templates.store.upsert(workload)
    caches.templates.store.upsert(daemon)
    caches.templates.store.upsert(_lookalike(cd))
    caches.daemon_sets[0].store.upsert(daemon_set)
    writes, events = fake_writes(caches), Events()
    reconciler = Reconciler(config, caches, writes, events, DomainStatusMetrics())  # type: ignore[arg-type]
    yield Setup(caches, writes, events, reconciler, cd)
    client.close()


async def test_a_lookalike_is_reported_once_and_never_written(setup: Setup) -> None:
    """Live domain: its own template stands, nothing is created or written for the look-alike."""
    for _ in range(2):
        await setup.reconciler.reconcile(object_key(setup.domain))
    assert f"{TENANT}/lookalike" not in setup.writes.touched()
    assert ("create", "team-a/victim-channel") not in setup.writes.log  # its own template is there
    ignored = setup.events.with_reason(reasons.LABEL_IGNORED)
    assert len(ignored) == 1
    assert ignored[0].regarding.namespace == TENANT
    assert "team-a" not in ignored[0].note and "victim" not in ignored[0].note


async def test_teardown_deletes_the_domains_own_objects_and_not_the_lookalike(setup: Setup) -> None:
    """Terminating domain: the first step deletes its templates and DaemonSet, never the look-alike."""
    assert setup.domain.metadata is not None
    setup.domain.metadata.deletionTimestamp = dt.datetime(2026, 11, 28, tzinfo=dt.UTC)
    setup.caches.domains.store.upsert(setup.domain)
    await setup.reconciler.reconcile(object_key(setup.domain))
    deleted = {key for verb, key in setup.writes.log if verb == "delete"}
    daemon = f"{DRIVER_NAMESPACE}/{daemon_object_name(UID)}"
    assert deleted == {"team-a/victim-channel", daemon}  # the daemon template and the DaemonSet share it
    assert [verb for verb, key in setup.writes.log if verb == "delete" and key == daemon] == ["delete"] * 2
    assert f"{TENANT}/lookalike" not in setup.writes.touched()
