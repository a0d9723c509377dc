"""The kubelet plugin as a real process on the harness' real kubelets: the mode-independent checks.

The harness (``SimulatedNode``, ``PluginProcess``) is tests/integration/pluginharness.py. Checks here:
registration with the kubelet, the published ResourceSlice (owner, pool, devices), the gRPC health
endpoint, metrics, a clean SIGTERM shutdown (sockets gone, exit 0, slice left), a broken NVML
profile stopping startup with a clear reason, and a fabric still registering at start waited for.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import Any

import pytest

from imexdra_sim.localcluster.cluster import LocalCluster
from tests.integration.pluginharness import (
    CLIQUE,
    DRIVER,
    PluginProcess,
    SimulatedNode,
    install_api,
    node_slices,
    plugin_kubeconfig,
    remove_slices,
)
from tests.support.waiting import eventually


@pytest.fixture(scope="module")
def plugin(cluster: LocalCluster) -> Iterator[PluginProcess]:
    """A driver-managed plugin on node-1 for the mode-independent checks."""
    install_api(cluster)
    remove_slices(cluster, "node-1")
    node = cluster.node("node-1")
    process = PluginProcess(SimulatedNode(node, CLIQUE), plugin_kubeconfig(cluster, node))
    process.start()
    yield process
    if process.process is not None:
        process.stop()


async def test_registers_and_publishes_its_resource_slice(
    cluster: LocalCluster, plugin: PluginProcess
) -> None:
    """The kubelet registers the plugin; one slice with channel-0 and daemon-0, owned by the Node."""
    await plugin.wait_registered()

    def published_both() -> list[dict[str, Any]]:
        slices = node_slices(cluster, "node-1")
        names = [[d["name"] for d in s["spec"]["devices"]] for s in slices]
        return slices if names == [["channel-0", "daemon-0"]] else []

    [published] = await eventually("ResourceSlice", published_both)
    node_uid = cluster.kubectl("get", "node", "node-1", "-o", "jsonpath={.metadata.uid}").stdout
    assert published["metadata"]["name"].startswith(f"00000-{DRIVER}-node-1-")
    assert published["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "node-1", "uid": node_uid, "controller": True}
    ]
    assert published["spec"]["pool"] == {"name": "node-1", "generation": 1, "resourceSliceCount": 1}
    assert [(d["name"], d["attributes"]) for d in published["spec"]["devices"]] == [
        ("channel-0", {"type": {"string": "channel"}, "id": {"int": 0}}),
        ("daemon-0", {"type": {"string": "daemon"}, "id": {"int": 0}}),
    ]
    assert plugin.logged("Feature gates")
    assert plugin.logged('"ComputeDomainCliques": true') or plugin.logged('"ComputeDomainCliques":true')


async def test_health_and_metrics_endpoints(plugin: PluginProcess) -> None:
    """The gRPC health check answers SERVING; /metrics has upstream's plugin metrics."""
    import grpc

    from imexdra.dra.health import SERVING, decode_check_request, encode_check_response

    await plugin.wait_registered()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{plugin.health_port}") as channel:
        check = channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=lambda service: b"\x0a" + bytes([len(service)]) + service.encode(),
            response_deserializer=lambda data: data,
        )
        assert await check("liveness", timeout=10) == encode_check_response(SERVING)
    assert decode_check_request(b"\x0a\x08liveness") == "liveness"
    text = await eventually("metrics", plugin.metrics)
    labels = 'device_type="channel",driver="compute-domain.nvidia.com",node="node-1"'
    assert f"nvidia_dra_prepared_devices{{{labels}}} 0.0" in text


async def test_sigterm_shuts_down_cleanly_and_the_kubelet_retires_the_slice(
    cluster: LocalCluster, plugin: PluginProcess
) -> None:
    """SIGTERM: exit 0, sockets removed; as upstream the plugin leaves its slice, the kubelet wipes it.

    The kubelet deletes a driver's slices once no plugin of that driver has been registered on the
    node for its wiping delay (30 s), which is how upstream's slices go on a clean shutdown.
    """
    await plugin.wait_registered()
    await eventually("ResourceSlice", lambda: node_slices(cluster, "node-1"))
    assert plugin.stop(signal.SIGTERM) == 0
    assert not (plugin.sim.plugin_dir / "dra.sock").exists()
    assert not (plugin.sim.node.registry_dir / f"{DRIVER}-reg.sock").exists()
    assert plugin.logged('"shutdown"')
    assert len(node_slices(cluster, "node-1")) == 1
    await eventually(
        "kubelet wipes the slice", lambda: not node_slices(cluster, "node-1"), within=120, interval=2
    )


def test_a_broken_nvml_profile_stops_startup_with_the_reason(cluster: LocalCluster) -> None:
    """NVML init failing (the mock refuses its profile, code 999) ends startup with exit 1 and says why."""
    node = cluster.node("node-0")
    sim = SimulatedNode(node, CLIQUE)
    sim.nvml_profile.write_text("fabric.clique=1\n")  # a typo: the key is fabric.clique_id
    process = PluginProcess(sim, plugin_kubeconfig(cluster, node))
    process.start()
    try:
        assert process.process is not None
        assert process.process.wait(timeout=60) == 1
    finally:
        SimulatedNode(node, CLIQUE)  # a valid profile again for whoever uses node-0 next
    output = process.output()
    # The library's own line names the file and the key, the plugin's names the NVML call and code.
    assert f"nvml-mock: {sim.nvml_profile}:1:" in output and "fabric.clique" in output
    assert "Using NVML library" in output
    failure = next(line for line in output.splitlines() if "Kubelet plugin failed" in line)
    assert "nvmlInitWithFlags" in failure and "code 999" in failure


async def test_a_fabric_still_registering_at_start_is_waited_for(cluster: LocalCluster) -> None:
    """Upstream #1264's reboot race: every GPU IN_PROGRESS when the plugin starts. It polls the real NVML
    (nvidia-ml-py over the mock library) and, once the profile says completed, registers: no restart."""
    install_api(cluster)
    node = cluster.node("node-0")
    sim = SimulatedNode(node, CLIQUE)
    completed = sim.nvml_profile.read_text()
    sim.nvml_profile.write_text(completed + "fabric.state=in_progress\n")  # a later line wins
    process = PluginProcess(sim, plugin_kubeconfig(cluster, node))
    process.start()
    try:
        await eventually(
            "the plugin waiting for the fabric",
            lambda: process.logged("Waiting for NVLink fabric registration to complete", "state=2"),
        )
        assert process.process is not None and process.process.poll() is None
        staged = sim.nvml_profile.with_name("profile.tmp")  # replaced whole: the library reads it at init
        staged.write_text(completed)
        staged.replace(sim.nvml_profile)
        await process.wait_registered()
        assert process.logged("NVLink fabric registration completed")
        assert process.logged("Clique ID discovered", CLIQUE)
    finally:
        if process.process is not None:
            process.stop()
        SimulatedNode(node, CLIQUE)  # a valid profile again for whoever uses node-0 next
        remove_slices(cluster, "node-0")
