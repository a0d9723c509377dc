"""The real kubelet plugin, configured by the chart's env and running as the chart's account.

The chart's identities are installed (release ``chartkp``); the plugin is started for node-0 with the
rendered DaemonSet container's env, rendered with node-0's kubelet directories. Only what a container
runtime would bind at a container path is replaced by the simulated node's files (``/driver-root``
with its mock NVML library, ``/var/run/cdi``, ``/alt-proc-devices``, via the chart's per-component env), and
the token is bound to node-0 as a pod's would be. With the chart's RBAC and own-node policy the plugin
registers and publishes node-0's ResourceSlice; with a token of node-1 the policy refuses its writes.
The simulated hardware comes from the plugin's own integration harness.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.localcluster.processes import free_port
from tests.integration.pluginharness import CLIQUE, SimulatedNode
from tests.support.waiting import eventually
from tests.unit.chart.install import ChartRBAC, install_chart_rbac

RELEASE = "chartkp"
NAMESPACE = "chart-kp"
NODE = "node-0"
DRIVER = "compute-domain.nvidia.com"


@pytest.fixture(scope="module")
def sim(cluster: LocalCluster) -> SimulatedNode:
    """node-0's stand-in hardware (driver root with the mock NVML library, /proc/devices)."""
    return SimulatedNode(cluster.node(NODE), CLIQUE)


@pytest.fixture(scope="module")
def chart_rbac(cluster: LocalCluster, compute_domain_crds: None, sim: SimulatedNode) -> Iterator[ChartRBAC]:
    """The chart's identities, the plugin rendered for node-0's directories and simulated hardware."""
    node = sim.node
    port = free_port()
    values = {
        "altProcDevices": str(sim.proc_devices),
        "kubeletPlugin": {
            "kubeletRegistrarDirectoryPath": str(node.registry_dir),
            "kubeletPluginsDirectoryPath": str(node.plugins_dir),
            "metrics": {"computeDomainHttpEndpoint": f"$(POD_IP):{port}"},
            "containers": {
                "computeDomains": {
                    "healthcheckPort": 0,
                    # What the container runtime would bind at the chart's container paths.
                    "env": [
                        {"name": "DRIVER_ROOT_CTR_PATH", "value": str(sim.driver_root)},
                        {"name": "CDI_ROOT", "value": str(sim.cdi_root)},
                        {"name": "ALT_PROC_DEVICES_PATH", "value": str(sim.proc_devices)},
                    ],
                }
            },
        },
    }
    installed = install_chart_rbac(cluster, release=RELEASE, namespace=NAMESPACE, values=values)
    yield installed
    installed.uninstall()
    cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)


def plugin_env(installed: ChartRBAC, kubeconfig: Path) -> dict[str, str]:
    """The rendered container env as the kubelet would pass it on node-0, plus KUBECONFIG."""
    (daemonset,) = installed.rendered.of_kind("DaemonSet")
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    fields = {"spec.nodeName": NODE, "metadata.namespace": NAMESPACE, "status.podIP": "127.0.0.1"}
    env: dict[str, str] = {}
    for entry in container["env"]:
        if "valueFrom" in entry:
            env[entry["name"]] = fields[entry["valueFrom"]["fieldRef"]["fieldPath"]]
        else:
            value = entry["value"]
            for name, resolved in env.items():
                value = value.replace(f"$({name})", resolved)
            env[entry["name"]] = value
    return {
        **env,
        "KUBECONFIG": str(kubeconfig),
        "LOGGING_FORMAT": "json",
        "PATH": os.environ.get("PATH", ""),
    }


class Plugin:
    """The plugin process with its log."""

    def __init__(self, installed: ChartRBAC, sim: SimulatedNode, *, token_node: str) -> None:
        (daemonset,) = installed.rendered.of_kind("DaemonSet")
        command = daemonset["spec"]["template"]["spec"]["containers"][0]["command"]
        self.log = sim.base / f"chart-plugin-{token_node}.log"
        env = plugin_env(installed, installed.kubeconfig("kubeletPlugin", node=token_node))
        with self.log.open("ab") as out:
            self.log_offset = out.tell()  # the file outlives this process: read only what it writes
            self.process = subprocess.Popen(
                [str(Path(sys.executable).parent / command[0]), *command[1:]],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def logged(self, pattern: str) -> bool:
        """Whether this process' log matches ``pattern``."""
        with self.log.open("rb") as log:
            log.seek(self.log_offset)
            return re.search(pattern, log.read().decode(errors="replace")) is not None

    def stop(self) -> int:
        """SIGTERM and wait for the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=30)


def node_slices(cluster: LocalCluster) -> list[dict[str, Any]]:
    """The driver's ResourceSlices of node-0."""
    out = cluster.kubectl("get", "resourceslices", "-o", "json", f"--field-selector=spec.nodeName={NODE}")
    return [s for s in json.loads(out.stdout)["items"] if s["spec"]["driver"] == DRIVER]


async def test_plugin_runs_with_the_charts_env_and_rbac(
    cluster: LocalCluster, chart_rbac: ChartRBAC, sim: SimulatedNode
) -> None:
    """Registered with the kubelet, node-0's slice published, nothing refused, clean exit."""
    for stale in node_slices(cluster):  # left by earlier plugin tests on this node
        cluster.kubectl("delete", "resourceslice", stale["metadata"]["name"])
    plugin = Plugin(chart_rbac, sim, token_node=NODE)
    try:
        await eventually(
            "plugin registered with the kubelet", lambda: plugin.logged("Registered with the kubelet")
        )

        def published() -> bool:
            return [[d["name"] for d in s["spec"]["devices"]] for s in node_slices(cluster)] == [
                ["channel-0", "daemon-0"]
            ]

        await eventually("node-0's ResourceSlice published as the chart's account", published)
        assert plugin.process.poll() is None
        # An RBAC denial reads '... is forbidden: User "..." cannot ...' (a bare "403" also matches
        # resourceVersions; other 403s, e.g. a terminating namespace, are not about the chart).
        assert not plugin.logged(r'forbidden: User \\?"[^"\\]+\\?" cannot'), (
            "the plugin was refused something"
        )
    finally:
        code = plugin.stop()
    assert code == 0


async def test_plugin_with_another_nodes_token_is_refused(
    cluster: LocalCluster, chart_rbac: ChartRBAC, sim: SimulatedNode
) -> None:
    """A plugin on node-0 holding node-1's token cannot write node-0's slice: the own-node policy says why."""
    for stale in node_slices(cluster):
        cluster.kubectl("delete", "resourceslice", stale["metadata"]["name"])
    plugin = Plugin(chart_rbac, sim, token_node="node-1")
    try:
        await eventually(
            "the own-node policy refusing the slice",
            lambda: plugin.logged("may write only ResourceSlices of its own node node-1"),
        )
        assert node_slices(cluster) == []
    finally:
        plugin.stop()
