"""The kubelet plugin as a real process on the harness' real kubelets: harness plus mode-independent checks.

``SimulatedNode`` lays out a node's stand-in hardware under its host dir (``devices.driverroot_fake``:
a driver root with the mock NVML library and its GB200 profile, regular files for ``/dev/nvidia*`` and
the fabric-imex-mgmt capability; a fake ``/proc/devices``; a CDI root); ``PluginProcess`` runs the
``compute-domain-kubelet-plugin`` console script for it, pointed at the node's kubelet directories,
with a kubeconfig of its own whose user holds only the plugin's RBAC (upstream's kubelet-plugin
ClusterRole and driver-namespace Role). The mode modules (``test_kubeletplugin_drivermanaged``,
``test_kubeletplugin_hostmanaged``) import this harness.

Checks here: registration with the kubelet, the published ResourceSlice (owner, pool, devices), the
gRPC health endpoint, metrics, a clean SIGTERM shutdown (sockets gone, exit 0, slice left), and a
broken NVML profile stopping startup with a clear reason.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from imexdra.devices import driverroot_fake
from imexdra.kubeletplugin.checkpoint import Checkpoint, unmarshal
from imexdra.localcluster.binaries import nvml_mock_library
from imexdra.localcluster.cluster import LocalCluster
from imexdra.localcluster.kubeconfig import write_kubeconfig
from imexdra.localcluster.nodes import Node
from imexdra.localcluster.processes import free_port
from tests.integration.helpers import apply, eventually

DRIVER = "compute-domain.nvidia.com"
DRIVER_NAMESPACE = "imexdra-kp"
CLIQUE = "7c9a3e1f-0d2b-4c5e-8f6a-1b2c3d4e5f60.32766"
PLUGIN_BIN = Path(sys.executable).parent / "compute-domain-kubelet-plugin"
CRD_DIR = Path(__file__).parents[2] / "deployments/helm/imexdra/crds"
CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"
CHANNEL_SELECTOR = (
    "device.driver == 'compute-domain.nvidia.com' && "
    "device.attributes['compute-domain.nvidia.com'].type == 'channel' && "
    "device.attributes['compute-domain.nvidia.com'].id == 0"
)
DAEMON_CLASS = "compute-domain-daemon.nvidia.com"
DAEMON_SELECTOR = (
    "device.driver == 'compute-domain.nvidia.com' && "
    "device.attributes['compute-domain.nvidia.com'].type == 'daemon'"
)
# Least privilege, as the chart grants it (deployments/helm/imexdra/templates/rbac-kubeletplugin.yaml):
# narrower than upstream's role, so these tests also show the plugin needs no more.
PLUGIN_RULES = [
    {"apiGroups": ["resource.nvidia.com"], "resources": ["computedomains"], "verbs": ["list", "watch"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get"]},
    {
        "apiGroups": ["resource.k8s.io"],
        "resources": ["resourceslices"],
        "verbs": ["list", "watch", "create", "update", "delete"],
    },
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
]
#: Driver-managed plugins also label their node for the ComputeDomain they serve.
NODE_UPDATE_RULE = {"apiGroups": [""], "resources": ["nodes"], "verbs": ["update"]}


def install_api(cluster: LocalCluster) -> None:
    """CRDs, both DeviceClasses with upstream's exact CEL selectors, the driver namespace and the RBAC."""
    cluster.kubectl("apply", "-f", str(CRD_DIR))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
    classes = [(CHANNEL_CLASS, CHANNEL_SELECTOR), (DAEMON_CLASS, DAEMON_SELECTOR)]
    apply(
        cluster,
        *(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": name},
                "spec": {"selectors": [{"cel": {"expression": selector}}]},
            }
            for name, selector in classes
        ),
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": DRIVER_NAMESPACE}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "imexdra-kubeletplugin"},
            "rules": [*PLUGIN_RULES, NODE_UPDATE_RULE],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "imexdra-kubeletplugin-hostmanaged"},
            "rules": PLUGIN_RULES,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "imexdra-kubeletplugin", "namespace": DRIVER_NAMESPACE},
            "rules": [
                {
                    "apiGroups": ["resource.nvidia.com"],
                    "resources": ["computedomaincliques"],
                    "verbs": ["get"],
                },
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
                {"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["get"]},
            ],
        },
    )


def plugin_kubeconfig(cluster: LocalCluster, node: Node, *, host_managed: bool = False) -> Path:
    """A kubeconfig for a user of its own, bound to the plugin's roles only."""
    cluster_role = "imexdra-kubeletplugin-hostmanaged" if host_managed else "imexdra-kubeletplugin"
    identity = f"{cluster_role}-{node.name}"  # roleRefs are immutable: one binding per mode and node
    user = f"{cluster_role}:{node.name}"
    cert = cluster.pki.issue(identity, common_name=user)
    subject = [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]
    apply(
        cluster,
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": identity},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
            "subjects": subject,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": identity, "namespace": DRIVER_NAMESPACE},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "imexdra-kubeletplugin",
            },
            "subjects": subject,
        },
    )
    assert cluster.run_dir is not None
    path = cluster.run_dir / f"{identity}.kubeconfig"
    return write_kubeconfig(
        path, server=cluster.apiserver_url, ca=cluster.pki.ca.cert, client=cert, user=user
    )


@dataclass
class SimulatedNode:
    """A node's stand-in hardware and the plugin's files on it."""

    node: Node
    clique: str | None

    def __post_init__(self) -> None:
        self.base = self.node.host_dir / "imexdra"
        self.cdi_root = self.base / "cdi"
        fabric = driverroot_fake.Fabric.parse(self.clique) if self.clique else None
        hardware = driverroot_fake.write_node_hardware(
            self.base, driverroot_fake.Tray(self.node.name, fabric), nvml_library=nvml_mock_library()
        )
        self.driver_root = hardware.driver_root
        self.proc_devices = hardware.proc_devices

    @property
    def nvml_profile(self) -> Path:
        """The mock NVML library's profile in the driver root."""
        return self.driver_root / driverroot_fake.NVML_LIBRARY_DIR / driverroot_fake.NVML_MOCK_PROFILE

    @property
    def plugin_dir(self) -> Path:
        return self.node.plugins_dir / DRIVER

    def claim_spec(self, claim_uid: str) -> Path:
        return self.cdi_root / f"k8s.compute-domain.nvidia.com-claim_{claim_uid}.yaml"

    def checkpoint(self) -> Checkpoint:
        return unmarshal((self.plugin_dir / "checkpoint.json").read_bytes())


@dataclass
class PluginProcess:
    """``compute-domain-kubelet-plugin`` for one simulated node."""

    sim: SimulatedNode
    kubeconfig: Path
    host_managed: bool = False
    metrics_port: int = field(default_factory=free_port)
    health_port: int = field(default_factory=free_port)
    extra_env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> Path:
        return self.sim.base / "plugin.log"

    def env(self) -> dict[str, str]:
        node = self.sim.node
        return {
            "PATH": os.environ.get("PATH", ""),
            "NODE_NAME": node.name,
            "NAMESPACE": DRIVER_NAMESPACE,
            "KUBECONFIG": str(self.kubeconfig),
            "KUBELET_REGISTRAR_DIRECTORY_PATH": str(node.registry_dir),
            "KUBELET_PLUGINS_DIRECTORY_PATH": str(node.plugins_dir),
            "CDI_ROOT": str(self.sim.cdi_root),
            "DRIVER_ROOT_CTR_PATH": str(self.sim.driver_root),
            # A host process sees the driver root where the host has it: CDI host paths are its files.
            "NVIDIA_DRIVER_ROOT": str(self.sim.driver_root),
            "ALT_PROC_DEVICES_PATH": str(self.sim.proc_devices),
            "FEATURE_GATES": "HostManagedIMEX=true," if self.host_managed else "",
            "HEALTHCHECK_PORT": str(self.health_port),
            "HTTP_ENDPOINT": f"127.0.0.1:{self.metrics_port}",
            "LOGGING_FORMAT": "json",
            "V": "4",
            **self.extra_env,
        }

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                [str(PLUGIN_BIN)], env=self.env(), stdout=out, stderr=subprocess.STDOUT
            )

    def stop(self, signum: int = signal.SIGTERM, timeout: float = 30) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signum)
        code = self.process.wait(timeout=timeout)
        self.process = None
        return code

    def lines(self) -> list[dict[str, Any]]:
        entries = []
        for line in self.log.read_text().splitlines():
            try:
                entries.append(json.loads(line))
            except ValueError:
                continue
        return entries

    def logged(self, text: str) -> bool:
        return any(text in json.dumps(entry) for entry in self.lines())

    async def wait_registered(self) -> None:
        await eventually(
            "plugin registered with the kubelet", lambda: self.logged("registered with the kubelet")
        )

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())


def node_slices(cluster: LocalCluster, node: str) -> list[dict[str, Any]]:
    out = cluster.kubectl("get", "resourceslices", "-o", "json", f"--field-selector=spec.nodeName={node}")
    return [s for s in json.loads(out.stdout)["items"] if s["spec"]["driver"] == DRIVER]


def node_labels(cluster: LocalCluster, node: str) -> dict[str, str]:
    labels: dict[str, str] = json.loads(cluster.kubectl("get", "node", node, "-o", "json").stdout)[
        "metadata"
    ]["labels"]
    return labels


@pytest.fixture(scope="module")
def plugin(cluster: LocalCluster) -> Iterator[PluginProcess]:
    """A driver-managed plugin on node-1 for the mode-independent checks."""
    install_api(cluster)
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
    assert plugin.logged("feature gates")
    assert plugin.logged('"ComputeDomainCliques": true') or plugin.logged('"ComputeDomainCliques":true')


async def test_health_and_metrics_endpoints(plugin: PluginProcess) -> None:
    """The gRPC health check answers SERVING; /metrics has upstream's plugin metrics."""
    import grpc

    from imexdra.kubeletplugin.health import SERVING, decode_check_request, encode_check_response

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
    logged_before = process.log.stat().st_size if process.log.exists() else 0
    process.start()
    try:
        assert process.process is not None
        assert process.process.wait(timeout=60) == 1
    finally:
        SimulatedNode(node, CLIQUE)  # a valid profile again for whoever uses node-0 next
    with process.log.open() as log:
        log.seek(logged_before)
        output = log.read()
    # The library's own line names the file and the key, the plugin's names the NVML call and code.
    assert f"nvml-mock: {sim.nvml_profile}:1:" in output and "fabric.clique" in output
    assert "using NVML library" in output
    failure = next(line for line in output.splitlines() if "kubelet plugin failed" in line)
    assert "nvmlInitWithFlags" in failure and "code 999" in failure
