"""HostManagedIMEX end to end on the real kubelets (docs/data-path.md §10, docs/host-managed.md).

node-0 has an NVLink clique and runs its own host nvidia-imex (the fake, on the command socket the
plugin checks), node-1 has none; both plugins run with ``HostManagedIMEX=true``. The test stands in for
the controller by creating the workload ResourceClaimTemplate.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import yaml

from imexdra.kubeletplugin.checkpoint.model import ClaimState
from imexdra.kubeletplugin.configs.apply import HOST_IMEX_NOT_READY_MESSAGE, NO_CLIQUE_MESSAGE
from imexdra_sim.builders import channel_template, compute_domain
from imexdra_sim.devices.procfs_fake import write_proc_devices
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.events import driver_prepare_failure
from tests.integration.pluginharness import (
    CLIQUE,
    DRIVER,
    LABEL,
    HostImex,
    PluginProcess,
    SimulatedNode,
    install_api,
    node_labels,
    node_slices,
    plugin_kubeconfig,
    pod_claim_uid,
    pod_field,
    pod_gone,
)
from tests.support.builders import channel_pod
from tests.support.kubectl import apply, get_json, patch_status, uid_of
from tests.support.waiting import eventually


@pytest.fixture(scope="module")
def plugins(cluster: LocalCluster) -> Iterator[dict[str, PluginProcess]]:
    """Host-managed plugins on node-0 (clique) and node-1 (no clique)."""
    install_api(cluster)
    processes = {}
    for name, clique in (("node-0", CLIQUE), ("node-1", None)):
        node = cluster.node(name)
        kubeconfig = plugin_kubeconfig(cluster, node, host_managed=True)
        processes[name] = PluginProcess(SimulatedNode(node, clique), kubeconfig, host_managed=True)
        processes[name].start()
    yield processes
    for process in processes.values():
        if process.process is not None:
            process.stop()


@pytest.fixture(scope="module")
def module_host_imex(plugins: dict[str, PluginProcess]) -> Iterator[HostImex]:
    """node-0's host nvidia-imex service."""
    host_imex = HostImex(plugins["node-0"].sim)
    host_imex.start()
    yield host_imex
    host_imex.stop()


@pytest.fixture(autouse=True)
def host_imex(module_host_imex: HostImex) -> Iterator[HostImex]:
    """node-0's host nvidia-imex, running at the start and the end of every test."""
    if module_host_imex.process is None:
        module_host_imex.start()
    yield module_host_imex
    if module_host_imex.process is None:
        module_host_imex.start()


@pytest.fixture
def namespace(cluster: LocalCluster) -> Iterator[str]:
    """A fresh namespace with a ComputeDomain ``train``."""
    name = f"kp-hm-{uuid.uuid4().hex[:6]}"
    cluster.create_namespace(name)
    apply(cluster, compute_domain("train", name))
    yield name
    # The domain goes at once (no controller here gave it a finalizer): left to the namespace's slow
    # deletion, a later module's controller, which watches every namespace, adopted it and took a
    # channel number its test counted on (test_controller_resilience run after this module).
    cluster.kubectl("delete", "computedomain", "train", "-n", name, "--wait=true")
    cluster.kubectl("delete", "namespace", name, "--wait=false")


def domain_uid(cluster: LocalCluster, namespace: str) -> str:
    return uid_of(cluster, "computedomain", "train", namespace)


def prepare_event(cluster: LocalCluster, namespace: str, pod: str) -> str:
    event = driver_prepare_failure(cluster, namespace, pod)
    return str(event["message"]) if event else ""


async def running(cluster: LocalCluster, namespace: str, pod: str) -> None:
    await eventually(
        "pod Running", lambda: pod_field(cluster, namespace, pod, "{.status.phase}") == "Running", within=90
    )


async def test_slice_publishes_channel_zero_only(
    cluster: LocalCluster, plugins: dict[str, PluginProcess]
) -> None:
    """No daemon device under the gate; the gate overrides are logged at start."""
    for name, plugin in plugins.items():
        await plugin.wait_registered()

        def channel_only(name: str = name) -> bool:
            slices = node_slices(cluster, name)
            return [[d["name"] for d in s["spec"]["devices"]] for s in slices] == [["channel-0"]]

        await eventually("ResourceSlice with channel-0 only", channel_only)
        assert plugin.logged("Feature gate forced")


async def test_single_channel_claim_runs_without_node_label(
    cluster: LocalCluster, plugins: dict[str, PluginProcess], namespace: str
) -> None:
    """Channel 0 injected with no label and no readiness wait; pod deletion removes CDI and checkpoint."""
    plugin = plugins["node-0"]
    await plugin.wait_registered()
    apply(cluster, channel_template(namespace, "train-channel", domain_uid(cluster, namespace), "Single"))
    apply(cluster, channel_pod("worker", namespace, "train-channel", node="node-0"))
    await running(cluster, namespace, "worker")
    claim_uid = pod_claim_uid(cluster, namespace, "worker")
    pod_uid = pod_field(cluster, namespace, "worker", "{.metadata.uid}")
    creates = [r for r in plugin.sim.node.cri_records("CreateContainer") if r["pod_uid"] == pod_uid]
    assert [r["cdi_devices"] for r in creates] == [
        [f"k8s.compute-domain.nvidia.com/claim={claim_uid}-channel-0"]
    ]
    [device] = yaml.safe_load(plugin.sim.claim_spec(claim_uid).read_text())["devices"]
    assert [n["path"] for n in device["containerEdits"]["deviceNodes"]] == [
        "/dev/nvidia-caps-imex-channels/channel0"
    ]
    assert LABEL not in node_labels(cluster, "node-0")

    cluster.kubectl("delete", "pod", "worker", "-n", namespace, "--wait=false")
    await eventually("pod deleted", lambda: pod_gone(cluster, namespace, "worker"), within=90)
    assert not plugin.sim.claim_spec(claim_uid).exists()
    assert claim_uid not in plugin.sim.checkpoint().claims


async def test_host_imex_down_keeps_the_pod_pending_with_an_event_until_it_is_up(
    cluster: LocalCluster, plugins: dict[str, PluginProcess], namespace: str, host_imex: HostImex
) -> None:
    """Host nvidia-imex stopped: the pod stays Pending with an event naming the socket and what
    nvidia-imex-ctl said; once the service is started again, the kubelet's retry prepares it and it runs.
    """
    plugin = plugins["node-0"]
    await plugin.wait_registered()
    host_imex.stop()
    apply(cluster, channel_template(namespace, "train-channel", domain_uid(cluster, namespace), "Single"))
    apply(cluster, channel_pod("worker", namespace, "train-channel", node="node-0"))
    message = await eventually(
        "FailedPrepareDynamicResources", lambda: prepare_event(cluster, namespace, "worker"), within=90
    )
    socket = plugin.sim.host_imex_socket
    assert f"{HOST_IMEX_NOT_READY_MESSAGE}: host IMEX not ready at {socket}: nvidia-imex-ctl -q exited 1" in (
        message
    )
    assert pod_field(cluster, namespace, "worker", "{.status.phase}") == "Pending"
    claim_uid = pod_claim_uid(cluster, namespace, "worker")
    assert not plugin.sim.claim_spec(claim_uid).exists()

    host_imex.start()
    await running(cluster, namespace, "worker")
    assert plugin.sim.checkpoint().claims[claim_uid].state == ClaimState.PREPARE_COMPLETED


async def test_allocation_mode_all_is_a_permanent_pod_event(
    cluster: LocalCluster, plugins: dict[str, PluginProcess], namespace: str
) -> None:
    """allocationMode All is refused permanently and the reason shows up on the pod."""
    await plugins["node-0"].wait_registered()
    apply(cluster, channel_template(namespace, "all-channel", domain_uid(cluster, namespace), "All"))
    apply(cluster, channel_pod("greedy", namespace, "all-channel", node="node-0"))
    message = await eventually(
        "FailedPrepareDynamicResources", lambda: prepare_event(cluster, namespace, "greedy"), within=90
    )
    assert 'allocationMode "All" is not supported under HostManagedIMEX' in message
    assert "error preparing devices for claim" in message


async def test_node_without_clique_is_a_permanent_pod_event(
    cluster: LocalCluster, plugins: dict[str, PluginProcess], namespace: str
) -> None:
    """On a node without an NVLink clique the pod event names the missing clique."""
    await plugins["node-1"].wait_registered()
    apply(cluster, channel_template(namespace, "train-channel", domain_uid(cluster, namespace), "Single"))
    apply(cluster, channel_pod("stray", namespace, "train-channel", node="node-1"))
    message = await eventually(
        "FailedPrepareDynamicResources", lambda: prepare_event(cluster, namespace, "stray"), within=90
    )
    assert NO_CLIQUE_MESSAGE in message
    assert "NVLink clique" in message


async def test_second_channel_claim_on_the_node_is_refused(
    cluster: LocalCluster, plugins: dict[str, PluginProcess], namespace: str
) -> None:
    """A second claim for channel 0 on node-0 is refused by the checkpoint check until the first goes.

    The scheduler never allocates channel-0 twice, so the second claim is allocated by hand (status
    written as admin) and its pod is bound to node-0 directly: the plugin's node-local backstop.
    """
    plugin = plugins["node-0"]
    await plugin.wait_registered()
    uid = domain_uid(cluster, namespace)
    apply(cluster, channel_template(namespace, "train-channel", uid, "Single"))
    apply(cluster, channel_pod("first", namespace, "train-channel", node="node-0"))
    await running(cluster, namespace, "first")
    first_claim = pod_claim_uid(cluster, namespace, "first")

    second_pod = channel_pod("second", namespace, "unused", node="node-0")
    second_pod["spec"]["nodeName"] = "node-0"
    second_pod["spec"]["resourceClaims"] = [{"name": "channel", "resourceClaimName": "second"}]
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "second", "namespace": namespace},
        "spec": channel_template(namespace, "x", uid, "Single")["spec"]["spec"],
    }
    apply(cluster, claim, second_pod)
    allocation = {
        "devices": {
            "results": [{"request": "channel", "driver": DRIVER, "pool": "node-0", "device": "channel-0"}],
            "config": [{"source": "FromClaim", **claim["spec"]["devices"]["config"][0]}],
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-0"]}]}
            ]
        },
    }
    reserved = [
        {
            "resource": "pods",
            "name": "second",
            "uid": pod_field(cluster, namespace, "second", "{.metadata.uid}"),
        }
    ]
    patch_status(
        cluster,
        "resourceclaim",
        "second",
        namespace,
        {"status": {"allocation": allocation, "reservedFor": reserved}},
    )

    # The holder's UID goes to the plugin's log only; the pod's error names no other claim
    # (docs/tenancy.md, "Events and errors name nothing of another namespace").
    await eventually(
        "conflict logged", lambda: plugin.logged("Device held by another prepared claim", first_claim)
    )
    assert plugin.logged("requested device channel-0 is already allocated to a different claim")
    assert not plugin.logged("already allocated to a different claim", first_claim)
    assert pod_field(cluster, namespace, "second", "{.status.phase}") == "Pending"
    second_claim = uid_of(cluster, "resourceclaim", "second", namespace)
    checkpoint = plugin.sim.checkpoint()
    assert checkpoint.claims[first_claim].state == ClaimState.PREPARE_COMPLETED
    assert second_claim not in checkpoint.claims  # refused before anything was recorded

    cluster.kubectl("delete", "pod", "first", "-n", namespace, "--wait=false")
    await eventually("first pod gone", lambda: pod_gone(cluster, namespace, "first"), within=90)
    await running(cluster, namespace, "second")


def channel_health(cluster: LocalCluster, namespace: str, pod: str) -> list[tuple[str, str]]:
    """``(resourceID, health)`` of the pod's container's allocated DRA devices, as the kubelet shows them."""
    status = get_json(cluster, "pod", pod, "-n", namespace)["status"]
    return [
        (resource["resourceID"], resource.get("health", ""))
        for container in status.get("containerStatuses", [])
        for allocated in container.get("allocatedResourcesStatus", [])
        for resource in allocated.get("resources", [])
    ]


async def test_the_kubelet_shows_channel_health_from_the_plugins_stream(
    cluster: LocalCluster, plugins: dict[str, PluginProcess], namespace: str
) -> None:
    """The kubelet holds the resource-health stream open (no retries) and shows each device's health in
    the pod's status: Healthy, then Unhealthy once ``/proc/devices`` lost the channels' entry."""
    plugin = plugins["node-0"]
    await plugin.wait_registered()
    apply(cluster, channel_template(namespace, "health-channel", domain_uid(cluster, namespace), "Single"))
    apply(cluster, channel_pod("health", namespace, "health-channel", node="node-0"))
    await running(cluster, namespace, "health")
    # The kubelet names a device by its first CDI device ID.
    device = f"k8s.compute-domain.nvidia.com/claim={pod_claim_uid(cluster, namespace, 'health')}-channel-0"
    await eventually(
        "channel-0 Healthy in the pod's status",
        lambda: channel_health(cluster, namespace, "health") == [(device, "Healthy")],
        within=90,
    )
    original = plugin.sim.proc_devices.read_text()
    write_proc_devices(plugin.sim.proc_devices, imex_channels_major=None)
    try:
        await eventually(
            "channel-0 Unhealthy in the pod's status",
            lambda: channel_health(cluster, namespace, "health") == [(device, "Unhealthy")],
            within=90,
        )
        assert plugin.logged("Device unhealthy")
    finally:
        plugin.sim.proc_devices.write_text(original)
    cluster.kubectl("delete", "pod", "health", "-n", namespace, "--wait=false")
    await eventually("pod deleted", lambda: pod_gone(cluster, namespace, "health"), within=90)
