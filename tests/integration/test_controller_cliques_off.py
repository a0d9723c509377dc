"""The controller with ``ComputeDomainCliques=false``: membership and indices live in the domain's status.

What is real: the apiserver, the DaemonSet controller, the scheduler and the controller binary. What
stands in: three API-only nodes whose kubelet is ``FakeKubelet`` (pods reported Running and Ready with
an IP), the test labelling the nodes for the kubelet plugin and the pods' clique label for the daemons.

Aspects covered: no clique object is ever written; ``status.nodes`` carries the entries with indices
0..2; a SIGKILLed and restarted controller recovers the indices from the status and keeps them when a
member leaves and comes back.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import secrets
from collections.abc import AsyncIterator

import pytest

from imexdra.api.computedomain import ComputeDomain
from imexdra.common.kube.api import PatchType
from imexdra.common.kube.kubeclient import KubeClient
from imexdra.common.kube.models.core_v1 import Node, Pod
from imexdra_sim.apinodes import FakeKubelet
from imexdra_sim.builders import compute_domain_model, daemon_slice
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.integration.controller_harness import (
    ControllerUnderTest,
    controller_running,
    install_driver_namespace,
    label_as_daemon,
    leftovers,
)
from tests.integration.controller_standins import publish_daemon_devices
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

SUFFIX = secrets.token_hex(3)
DRIVER_NS = f"imexdra-nc-{SUFFIX}"
USER_NS = f"cd-nc-{SUFFIX}"
NODES = [f"nc-{SUFFIX}-{i}" for i in range(3)]
CLIQUE = "1c2d3e4f-5a6b-4c7d-8e9f-0a1b2c3d4e5f.9"
LABEL = "resource.nvidia.com/computeDomain"


@pytest.fixture(scope="module")
async def kubelet(cluster: LocalCluster, api: KubeClient) -> AsyncIterator[FakeKubelet]:
    """Three API-only nodes with daemon devices, kept alive by a fake kubelet."""
    install_driver_namespace(cluster, DRIVER_NS)
    cluster.create_namespace(USER_NS)
    fake = FakeKubelet(api, NODES, DRIVER_NS)
    await fake.register()
    publish_daemon_devices(cluster, NODES)
    heartbeat = asyncio.create_task(fake.run())
    yield fake
    heartbeat.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await heartbeat
    cluster.kubectl("delete", "resourceslices", *(daemon_slice(n)["metadata"]["name"] for n in NODES))
    cluster.kubectl("delete", "nodes", *NODES, "--wait=false")
    cluster.kubectl("delete", "namespace", USER_NS, DRIVER_NS, "--wait=false")


@pytest.fixture(scope="module")
async def controller(
    cluster: LocalCluster, compute_domain_crds: None, kubelet: FakeKubelet
) -> AsyncIterator[ControllerUnderTest]:
    """A controller with the cliques gate off; at the end every domain of this module is deleted."""
    name = f"controller-nc-{SUFFIX}"
    gates = "ComputeDomainCliques=false"
    async with controller_running(
        cluster, DRIVER_NS, USER_NS, name, gates=gates, namespaces=False
    ) as process:
        yield process


async def status_indices(kube: KubeClient) -> dict[str, int]:
    cd = await kube.get(ComputeDomain, "legacy", namespace=USER_NS)
    return {n.name: n.index for n in cd.status.nodes} if cd.status else {}


async def live_pods(kube: KubeClient, uid: str) -> dict[str, Pod]:
    pods = [p async for p in kube.list(Pod, namespace=DRIVER_NS, labels={LABEL: uid})]
    return {
        p.spec.nodeName: p
        for p in pods
        if p.spec and p.spec.nodeName and p.metadata and not p.metadata.deletionTimestamp
    }


async def start_daemon(kube: KubeClient, kubelet: FakeKubelet, pod: Pod) -> None:
    assert pod.metadata is not None and pod.metadata.name and pod.spec is not None and pod.spec.nodeName
    await kubelet.report_pod(pod.metadata.name, pod.spec.nodeName, ready=True)
    await label_as_daemon(kube, pod.metadata.name, DRIVER_NS, CLIQUE)


async def test_indices_live_in_status_and_survive_a_restart(
    cluster: LocalCluster, kube: KubeClient, kubelet: FakeKubelet, controller: ControllerUnderTest
) -> None:
    """status.nodes holds indices 0..2, no clique exists; after a SIGKILL a rejoining node gets its index."""
    created = await kube.create(compute_domain_model("legacy", USER_NS, num_nodes=3))
    assert created.metadata is not None and created.metadata.uid
    uid = created.metadata.uid
    await eventually("DaemonSet", lambda: leftovers(cluster, uid)["daemonsets"], within=30)
    for node in NODES:
        await kube.patch(Node, node, {"metadata": {"labels": {LABEL: uid}}}, patch_type=PatchType.MERGE)
    pods = await eventually("3 bound pods", lambda: _all_bound(kube, uid), within=120, interval=1.0)
    for count, node in enumerate(sorted(pods, reverse=True), start=1):  # join order != node-name order
        await start_daemon(kube, kubelet, pods[node])
        await eventually(f"{count} indexed", functools.partial(has_entries, kube, count), within=30)
    indices = await eventually("3 indexed nodes", lambda: indexed(kube), within=30)
    assert indices == {node: i for i, node in enumerate(sorted(pods, reverse=True))}
    assert leftovers(cluster, uid)["computedomaincliques"] == []

    controller.kill()
    controller.start()
    await controller.wait_ready()
    leaving = max(indices, key=lambda node: indices[node])  # the node with index 2 leaves...
    old = pods[leaving]
    assert old.metadata is not None and old.metadata.name
    await kube.delete(Pod, old.metadata.name, namespace=DRIVER_NS, grace_period=0)
    await eventually(f"{leaving} left", lambda: left(kube, leaving), within=60)

    async def replacement() -> Pod | None:
        pod = (await live_pods(kube, uid)).get(leaving)
        return pod if pod is not None and pod.metadata and pod.metadata.name != old.metadata.name else None

    fresh = await eventually("replacement pod", replacement, within=60, interval=1.0)
    await start_daemon(kube, kubelet, fresh)  # ...and comes back: it gets the lowest free index, 2 again
    assert await eventually("3 indexed nodes again", lambda: indexed(kube), within=30) == indices
    assert leftovers(cluster, uid)["computedomaincliques"] == []


async def _all_bound(kube: KubeClient, uid: str) -> dict[str, Pod] | None:
    pods = await live_pods(kube, uid)
    return pods if len(pods) == len(NODES) else None


async def indexed(kube: KubeClient) -> dict[str, int] | None:
    found = await status_indices(kube)
    return found if len(found) == len(NODES) else None


async def has_entries(kube: KubeClient, count: int) -> bool:
    return len(await status_indices(kube)) == count


async def left(kube: KubeClient, node: str) -> bool:
    found = await status_indices(kube)
    return len(found) == len(NODES) - 1 and node not in found
