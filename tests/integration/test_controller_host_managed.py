"""The controller under HostManagedIMEX on the real control plane (docs/data-path.md §10, host-managed.md).

The real ``compute-domain-controller`` binary runs as a subprocess with ``HostManagedIMEX=true``,
authenticated as a ServiceAccount holding only the controller's RBAC. Aspects covered: the resolved
gate overrides are logged; a ComputeDomain gets the finalizer, only the workload ResourceClaimTemplate
(allocation mode forced to Single) and ``status.status=Ready`` whatever ``numNodes`` says; no DaemonSet,
daemon claim template, clique or node label ever appears; deletion removes the template and both
finalizers, the domain disappears, and its metric is forgotten; a name clash with a foreign template
keeps the domain NotReady until the clash is gone (Ready means the workload template exists).
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Awaitable

import pytest

from imexdra.api.computedomain import ComputeDomain
from imexdra.api.constants import AllocationMode
from imexdra.common.kube.kubeclient import KubeClient
from imexdra.common.kube.models.resource_v1 import ResourceClaimTemplate
from imexdra_sim.builders import compute_domain_model
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.integration.controller_harness import (
    ControllerUnderTest,
    controller_running,
    events_of,
    foreign_template,
    labelled,
    leftovers,
    metric,
)
from tests.support.kubectl import apply, get_json
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

SUFFIX = secrets.token_hex(3)
DRIVER_NS = f"imexdra-host-{SUFFIX}"
USER_NS = f"cd-host-{SUFFIX}"
FINALIZER = "resource.nvidia.com/computeDomain"


@pytest.fixture(scope="module")
async def controller(cluster: LocalCluster, compute_domain_crds: None) -> AsyncIterator[ControllerUnderTest]:
    """A host-managed controller; at the end every domain of this module is deleted through it."""
    name = f"controller-host-{SUFFIX}"
    async with controller_running(cluster, DRIVER_NS, USER_NS, name, gates="HostManagedIMEX=true") as process:
        yield process


async def ready_domain(kube: KubeClient, name: str, **spec: object) -> ComputeDomain:
    await kube.create(compute_domain_model(name, USER_NS, **spec))  # type: ignore[arg-type]

    async def ready() -> ComputeDomain | None:
        cd = await kube.get(ComputeDomain, name, namespace=USER_NS)
        return cd if cd.status is not None and cd.status.status == "Ready" else None

    cd: ComputeDomain = await eventually(f"{name} Ready", ready, within=30)
    return cd


def test_resolved_gate_overrides_are_logged(controller: ControllerUnderTest) -> None:
    """Startup logs both forced gates and the effective map with HostManagedIMEX on."""
    events = controller.log_events()
    forced = {e["gate"]: e["value"] for e in events if e.get("msg") == "Feature gate forced"}
    assert forced == {"IMEXDaemonsWithDNSNames": False, "ComputeDomainCliques": False}
    gates = next(e for e in events if e.get("msg") == "Feature gates")["featureGates"]
    assert gates["HostManagedIMEX"] is True
    assert gates["ComputeDomainCliques"] is False


async def test_create_makes_only_the_workload_template_and_is_ready(
    cluster: LocalCluster, kube: KubeClient, controller: ControllerUnderTest
) -> None:
    """Finalizer, workload template with the spec's ChannelConfig (All stays All: the plugin rejects it
    at prepare, docs/data-path.md §10), Ready despite numNodes; nothing else."""
    cd = await ready_domain(kube, "train-a", num_nodes=4, mode=AllocationMode.ALL)
    assert cd.metadata is not None and cd.status is not None
    uid = cd.metadata.uid
    assert cd.metadata.finalizers == [FINALIZER]
    assert cd.status.nodes == []
    raw = get_json(cluster, "computedomain", "train-a", "-n", USER_NS)
    assert "nodes" not in raw["status"]
    rct = await kube.get(ResourceClaimTemplate, "train-a-channel", namespace=USER_NS)
    assert rct.metadata is not None and rct.spec is not None
    assert rct.metadata.finalizers == [FINALIZER]
    assert rct.metadata.labels == {
        "resource.nvidia.com/computeDomain": uid,
        "resource.nvidia.com/computeDomainTarget": "Workload",
    }
    config = rct.spec.spec.devices.config[0].opaque  # type: ignore[index,union-attr]
    assert config is not None
    assert config.parameters == {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomainChannelConfig",
        "domainID": uid,
        "allocationMode": "All",
    }
    assert leftovers(cluster, uid) == {
        "resourceclaimtemplates": ["train-a-channel"],
        "daemonsets": [],
        "computedomaincliques": [],
        "nodes": [],
    }
    # Other tests share the cluster (and may run a driver-managed controller): look for this domain's.
    daemon_sets = get_json(cluster, "daemonsets", "-A")["items"]
    assert not [d for d in daemon_sets if d["metadata"]["name"] == f"computedomain-daemon-{uid}"]


async def test_delete_removes_template_then_domain_and_forgets_metrics(
    cluster: LocalCluster, kube: KubeClient, controller: ControllerUnderTest
) -> None:
    """Deletion removes the template and both finalizers; the domain goes and its gauge entry with it."""
    cd = await ready_domain(kube, "train-b")
    assert cd.metadata is not None
    uid = cd.metadata.uid
    assert uid is not None
    ready_before = metric(controller.metrics(), "nvidia_dra_compute_domain_info", status="Ready")
    assert ready_before >= 1
    await kube.delete(ComputeDomain, "train-b", namespace=USER_NS)

    async def gone() -> bool:
        names = [
            item["metadata"]["name"] for item in get_json(cluster, "computedomains", "-n", USER_NS)["items"]
        ]
        return "train-b" not in names

    await eventually("train-b deleted", gone, within=30)
    # The domain's finalizer goes last: once the domain is gone, its template is already gone.
    assert labelled(cluster, "resourceclaimtemplates", uid) == []
    ready_after = metric(controller.metrics(), "nvidia_dra_compute_domain_info", status="Ready")
    assert ready_after == ready_before - 1
    finalized = [
        e
        for e in controller.log_events()
        if e.get("msg") == "ComputeDomain finalized" and e.get("domain") == uid
    ]
    assert len(finalized) == 1


async def test_ready_waits_for_the_workload_template(
    cluster: LocalCluster, kube: KubeClient, controller: ControllerUnderTest
) -> None:
    """A foreign template of the wanted name: NotReady with ClaimTemplateConflict; once it goes, Ready."""
    apply(cluster, foreign_template("clash-channel", USER_NS))
    await kube.create(compute_domain_model("clash", USER_NS))  # type: ignore[arg-type]

    async def status() -> str:
        cd = await kube.get(ComputeDomain, "clash", namespace=USER_NS)
        return cd.status.status.value if cd.status is not None else ""

    assert await eventually("clash NotReady", lambda: _is(status(), "NotReady"), within=30)
    uid = get_json(cluster, "computedomain", "clash", "-n", USER_NS)["metadata"]["uid"]
    conflict = await eventually(
        "ClaimTemplateConflict event",
        lambda: [e for e in events_of(cluster, USER_NS, uid) if e["reason"] == "ClaimTemplateConflict"],
        within=30,
    )
    assert "clash-channel" in conflict[0]["message"]
    assert await status() == "NotReady"
    cluster.kubectl("delete", "resourceclaimtemplate", "clash-channel", "-n", USER_NS)
    assert await eventually("clash Ready", lambda: _is(status(), "Ready"), within=40)
    assert labelled(cluster, "resourceclaimtemplates", uid)[0]["metadata"]["name"] == "clash-channel"
    ready = await eventually(
        "Ready transition event",
        lambda: [e for e in events_of(cluster, USER_NS, uid) if e["reason"] == "Ready"],
        within=30,
    )
    assert "workload ResourceClaimTemplate clash-channel exists" in ready[0]["message"]


async def _is(value: Awaitable[str], wanted: str) -> bool:
    return await value == wanted
