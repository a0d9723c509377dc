"""API writes of one domain's lifecycle while 18 daemons start: a handful of writes, zero conflicts.

What is real: the apiserver and its request metrics, the DaemonSet controller creating one daemon pod
per labelled node, the ResourceClaim controller and the scheduler allocating each pod's daemon device,
and the controller binary. What stands in: 18 API-only nodes (18 real kubelets are too heavy for this
2-core machine) whose kubelet is ``FakeKubelet`` — it registers the nodes, heartbeats their Leases,
reports each bound pod Running (first not Ready, then Ready) with an IP, and removes terminating pods;
the test labels the nodes (as the kubelet plugin would) and sets each pod's clique label (as its daemon
would). The daemons start spread over about a second, the way a job's pods land.

Counted: writes by the controller (its ``imexdra_controller_api_writes_total``) and conflicts seen by
the apiserver (``apiserver_request_total{code="409"}``) on every resource the controller writes.
Also covered: a SIGKILLed and restarted controller recovers all 18 indices from the clique and writes
nothing when nothing changed, and a domain created with its finalizer costs no write of the domain
before its deletion.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import secrets
from collections.abc import AsyncIterator

import pytest

from imexdra.api.computedomain import ComputeDomain
from imexdra.api.constants import COMPUTE_DOMAIN_FINALIZER
from imexdra.common.kube.api import PatchType
from imexdra.common.kube.kubeclient import KubeClient
from imexdra.common.kube.models.core_v1 import Node, Pod
from imexdra_sim.apinodes import FakeKubelet
from imexdra_sim.builders import compute_domain_model, daemon_slice
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.integration.controller_harness import (
    ControllerUnderTest,
    apiserver_requests,
    controller_running,
    install_driver_namespace,
    label_as_daemon,
    leftovers,
    metric,
    request_delta,
)
from tests.integration.controller_standins import publish_daemon_devices
from tests.support.kubectl import get_json
from tests.support.session import progress
from tests.support.waiting import eventually, stays_true

pytestmark = pytest.mark.integration

SUFFIX = secrets.token_hex(3)
DRIVER_NS = f"imexdra-wr-{SUFFIX}"
USER_NS = f"cd-wr-{SUFFIX}"
DAEMONS = 18
NODES = [f"wr-{SUFFIX}-{i:02d}" for i in range(DAEMONS)]
CLIQUE = "0f6c9a8e-52d1-4b7a-8e3f-6a5b4c3d2e1f.3"
LABEL = "resource.nvidia.com/computeDomain"
#: Resources only the controller writes (or, for DaemonSets, whose main resource only it writes).
CONTROLLER_RESOURCES = (
    {"resource": "computedomains"},
    {"resource": "computedomaincliques"},
    {"resource": "resourceclaimtemplates"},
    {"resource": "daemonsets", "subresource": ""},
)


@pytest.fixture(scope="module")
async def kubelet(cluster: LocalCluster, api: KubeClient) -> AsyncIterator[FakeKubelet]:
    """18 API-only nodes with daemon devices, kept alive by a fake kubelet."""
    install_driver_namespace(cluster, DRIVER_NS)
    cluster.create_namespace(USER_NS)
    fake = FakeKubelet(api, NODES, DRIVER_NS)
    await fake.register()
    publish_daemon_devices(cluster, NODES)
    task = asyncio.create_task(fake.run())
    yield fake
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    cluster.kubectl("delete", "resourceslices", *(daemon_slice(n)["metadata"]["name"] for n in NODES))
    cluster.kubectl("delete", "nodes", *NODES, "--wait=false")
    cluster.kubectl("delete", "namespace", USER_NS, DRIVER_NS, "--wait=false")


@pytest.fixture(scope="module")
async def controller(
    cluster: LocalCluster, compute_domain_crds: None, kubelet: FakeKubelet
) -> AsyncIterator[ControllerUnderTest]:
    """The controller under test (its metrics count only its own writes)."""
    name = f"controller-wr-{SUFFIX}"
    async with controller_running(cluster, DRIVER_NS, USER_NS, name, namespaces=False) as process:
        yield process


def writes(process: ControllerUnderTest) -> dict[str, float]:
    """The controller's writes by resource (all verbs and outcomes)."""
    samples = process.metrics()
    names = ("computedomains", "computedomains/status", "computedomaincliques", "resourceclaimtemplates")
    found = {name: metric(samples, "imexdra_controller_api_writes_total", resource=name) for name in names}
    found |= {
        n: metric(samples, "imexdra_controller_api_writes_total", resource=n) for n in ("daemonsets", "nodes")
    }
    return found


def conflicts(process: ControllerUnderTest) -> float:
    """409s the controller received on any request, writes or not."""
    samples = process.metrics()
    return metric(samples, "rest_client_requests_total", code="409") + metric(
        samples, "imexdra_controller_api_writes_total", code="409"
    )


def clique_indices(cluster: LocalCluster, uid: str) -> dict[str, int]:
    items = get_json(cluster, "computedomaincliques", "-n", DRIVER_NS)["items"]
    found = [c for c in items if c["metadata"]["name"] == f"{uid}.{CLIQUE}"]
    return {d["nodeName"]: d["index"] for d in found[0].get("daemons", [])} if found else {}


async def start_daemon(kube: KubeClient, kubelet: FakeKubelet, pod: Pod, rng: random.Random) -> None:
    """One daemon pod starting: Running, its daemon announces the clique, then its probe passes."""
    assert pod.metadata is not None and pod.metadata.name and pod.spec is not None and pod.spec.nodeName
    # Seeded jitter: the daemons start, announce and pass their probes in a random interleaving.
    await asyncio.sleep(rng.uniform(0.0, 1.0))
    await kubelet.report_pod(pod.metadata.name, pod.spec.nodeName, ready=False)
    await asyncio.sleep(rng.uniform(0.05, 0.2))
    await label_as_daemon(kube, pod.metadata.name, DRIVER_NS, CLIQUE)
    await asyncio.sleep(rng.uniform(0.2, 0.8))
    await kubelet.report_pod(pod.metadata.name, pod.spec.nodeName, ready=True)


async def scheduled_daemons(cluster: LocalCluster, kube: KubeClient, uid: str) -> list[Pod]:
    """Wait for the DaemonSet, label the nodes as the kubelet plugin would, wait for 18 bound pods."""
    await eventually("DaemonSet", lambda: leftovers(cluster, uid)["daemonsets"], within=30)
    for node in NODES:
        await kube.patch(Node, node, {"metadata": {"labels": {LABEL: uid}}}, patch_type=PatchType.MERGE)

    async def scheduled() -> list[Pod] | None:
        pods = [p async for p in kube.list(Pod, namespace=DRIVER_NS, labels={LABEL: uid})]
        bound = [p for p in pods if p.spec and p.spec.nodeName]
        return bound if len(bound) == DAEMONS else None

    pods: list[Pod] = await eventually("18 daemon pods scheduled", scheduled, within=120, interval=1.0)
    return pods


async def wait_ready_with_all_daemons(kube: KubeClient) -> None:
    async def ready() -> bool:
        cd = await kube.get(ComputeDomain, "big", namespace=USER_NS)
        return cd.status is not None and cd.status.status == "Ready" and len(cd.status.nodes) == DAEMONS

    await eventually("big Ready with 18 nodes", ready, within=60)


async def delete_and_wait_gone(cluster: LocalCluster, kube: KubeClient, uid: str, name: str = "big") -> None:
    """Delete the domain and wait until it and every object it had are gone."""
    await kube.delete(ComputeDomain, name, namespace=USER_NS)

    def gone() -> bool:
        return not get_json(cluster, "computedomains", "-n", USER_NS)["items"]

    await eventually(f"{name} gone", gone, within=90, interval=1.0)
    assert leftovers(cluster, uid) == {
        "resourceclaimtemplates": [],
        "daemonsets": [],
        "computedomaincliques": [],
        "nodes": [],
    }


async def test_eighteen_daemons_cost_a_handful_of_writes_and_no_conflicts(
    cluster: LocalCluster,
    kube: KubeClient,
    kubelet: FakeKubelet,
    controller: ControllerUnderTest,
    pytestconfig: pytest.Config,
) -> None:
    """Formation, restart and deletion of an 18-daemon domain: few writes, no 409 anywhere, no leftovers."""
    rng = random.Random(secrets.randbits(32))
    before = apiserver_requests(cluster)
    created = await kube.create(compute_domain_model("big", USER_NS, num_nodes=DAEMONS))
    assert created.metadata is not None and created.metadata.uid
    uid = created.metadata.uid
    pods = await scheduled_daemons(cluster, kube, uid)
    at_start = writes(controller)
    await asyncio.gather(*(start_daemon(kube, kubelet, pod, rng) for pod in pods))
    await wait_ready_with_all_daemons(kube)
    indices = clique_indices(cluster, uid)
    assert sorted(indices.values()) == list(range(DAEMONS))
    formed = writes(controller)
    formation = {k: formed[k] - at_start[k] for k in formed}
    progress(pytestconfig, f"controller writes while 18 daemons started: {formation}")
    assert formation["computedomaincliques"] <= 8, formation
    assert formation["computedomains/status"] <= 8, formation
    assert conflicts(controller) == 0

    controller.kill()  # a restarted controller recovers the indices and has nothing to write
    controller.start()
    await controller.wait_ready()
    await stays_true(
        "no write by the restarted controller, the indices kept",
        lambda: sum(writes(controller).values()) == 0 and clique_indices(cluster, uid) == indices,
        for_seconds=3,
        interval=0.5,
    )

    await delete_and_wait_gone(cluster, kube, uid)
    lifecycle = {k: v + formed[k] for k, v in writes(controller).items()}
    total = sum(lifecycle.values())
    progress(pytestconfig, f"controller writes for the whole lifecycle: {lifecycle} (total {total:.0f})")
    assert conflicts(controller) == 0
    after = apiserver_requests(cluster)
    seen = {
        str(labels): request_delta(before, after, code="409", **labels) for labels in CONTROLLER_RESOURCES
    }
    assert seen == dict.fromkeys(seen, 0.0)
    assert request_delta(before, after, resource="computedomaincliques", verb="POST") == 1


async def test_a_domain_born_with_its_finalizer_costs_no_finalizer_write(
    cluster: LocalCluster, kube: KubeClient, controller: ControllerUnderTest
) -> None:
    """Created holding its finalizer (restored from a backup, or written so by a tool): the controller goes
    straight to the templates and DaemonSet without a PATCH of the domain; its one write on the domain is
    the finalizer's removal at deletion."""
    before = writes(controller)["computedomains"]
    model = compute_domain_model("born", USER_NS)
    assert model.metadata is not None
    model.metadata.finalizers = [COMPUTE_DOMAIN_FINALIZER]
    created = await kube.create(model)
    assert created.metadata is not None and created.metadata.uid
    uid = created.metadata.uid
    await eventually("DaemonSet", lambda: leftovers(cluster, uid)["daemonsets"], within=30)
    assert writes(controller)["computedomains"] == before
    await delete_and_wait_gone(cluster, kube, uid, "born")
    assert writes(controller)["computedomains"] == before + 1
