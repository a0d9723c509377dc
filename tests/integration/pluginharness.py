"""The kubelet plugin as a real process on a harness node, and the objects its tests create.

``SimulatedNode`` lays out a node's stand-in hardware under its host dir (``devices.driverroot_fake``:
a driver root with the mock NVML library and its GB200 profile, the device nodes and the
fabric-imex-mgmt capability; a fake ``/proc/devices``; a CDI root); ``PluginProcess`` runs the
``compute-domain-kubelet-plugin`` console script for it, pointed at the node's kubelet directories,
with a kubeconfig of its own whose user holds only the plugin's RBAC (upstream's kubelet-plugin
ClusterRole and driver-namespace Role). ``HostImex`` is the node's own nvidia-imex service for the
host-managed tests: the driver root's fake ``nvidia-imex`` serving the command socket the plugin checks.
``create_domain`` stands in for the controller, with ``imexdra_sim.builders``' objects. Shared by the
plugin, crash, chart and runtime tests.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imexdra.kubeletplugin.checkpoint.model import Checkpoint, unmarshal
from imexdra_sim.builders import channel_template, compute_domain, isolated_channel_device_class
from imexdra_sim.devices import driverroot_fake
from imexdra_sim.devices.fakeimex.hostservice import CONFIG_NAME, HostImexService, service_argv
from imexdra_sim.localcluster.binaries import nvml_mock_library
from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.localcluster.kubeconfig import write_kubeconfig
from imexdra_sim.localcluster.nodes import Node
from imexdra_sim.localcluster.processes import free_port
from tests.support.kubectl import apply, patch_status, uid_of
from tests.support.paths import CRD_DIR
from tests.support.waiting import eventually

DRIVER = "compute-domain.nvidia.com"
DRIVER_NAMESPACE = "imexdra-kp"
CLIQUE = "7c9a3e1f-0d2b-4c5e-8f6a-1b2c3d4e5f60.32766"
PLUGIN_BIN = Path(sys.executable).parent / "compute-domain-kubelet-plugin"
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
    """CRDs, both DeviceClasses with upstream's exact CEL selectors (and channel isolation's class), the
    driver namespace and the RBAC."""
    cluster.kubectl("apply", "-f", str(CRD_DIR))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
    classes = [(CHANNEL_CLASS, CHANNEL_SELECTOR), (DAEMON_CLASS, DAEMON_SELECTOR)]
    apply(
        cluster,
        isolated_channel_device_class(),
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
    def host_imex_socket(self) -> Path:
        """Where the node's host nvidia-imex serves its command service (``IMEX_HOST_SOCKET_PATH``)."""
        return self.base / "nvidia-imex" / "imex_ctrl.sock"

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
    #: Where the latest ``start`` began writing in ``log``: every plugin of the node appends to one
    #: file, and a check must read this process' lines only. (Reading an earlier plugin's "registered
    #: with the kubelet" once let a test stop its plugin before the kubelet had registered it, so the
    #: kubelet never wiped its ResourceSlice.)
    log_offset: int = 0

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
            "IMEX_HOST_SOCKET_PATH": str(self.sim.host_imex_socket),
            "HEALTHCHECK_PORT": str(self.health_port),
            "HTTP_ENDPOINT": f"127.0.0.1:{self.metrics_port}",
            "LOGGING_FORMAT": "json",
            "V": "4",
            **self.extra_env,
        }

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.log_offset = out.tell()
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

    def output(self) -> str:
        """What this process (of its latest ``start``) wrote to the log."""
        with self.log.open("rb") as log:
            log.seek(self.log_offset)
            return log.read().decode(errors="replace")

    def lines(self) -> list[dict[str, Any]]:
        """The JSON log lines of this process."""
        entries = []
        for line in self.output().splitlines():
            try:
                entries.append(json.loads(line))
            except ValueError:
                continue
        return entries

    def logged(self, *texts: str) -> bool:
        """Whether one log entry holds every one of ``texts``."""
        return any(all(text in json.dumps(entry) for text in texts) for entry in self.lines())

    async def wait_registered(self) -> None:
        await eventually(
            "plugin registered with the kubelet", lambda: self.logged("Registered with the kubelet")
        )

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())


@dataclass
class HostImex:
    """The node's own ``nvidia-imex.service`` (a one-node IMEX domain), started and stopped by tests."""

    sim: SimulatedNode
    process: subprocess.Popen[bytes] | None = None

    def __post_init__(self) -> None:
        socket = self.sim.host_imex_socket
        HostImexService(
            socket.parent, address="127.0.0.1", peers=["127.0.0.1"], server_port=free_port(), socket=socket
        ).write()

    def start(self) -> None:
        """``systemctl start nvidia-imex``."""
        argv = service_argv(self.sim.host_imex_socket.parent / CONFIG_NAME, self.sim.driver_root)
        with (self.sim.base / "host-nvidia-imex.log").open("ab") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)

    def stop(self) -> None:
        """``systemctl stop nvidia-imex`` (no-op when stopped)."""
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=30)
            self.process = None


def remove_slices(cluster: LocalCluster, node: str) -> None:
    """Delete the driver's ResourceSlices of ``node``: a module starting a plugin there begins as on a
    fresh node, not with a slice an earlier module's plugin left for the kubelet to wipe later."""
    cluster.kubectl("delete", "resourceslices", f"--field-selector=spec.nodeName={node},spec.driver={DRIVER}")


def node_slices(cluster: LocalCluster, node: str) -> list[dict[str, Any]]:
    out = cluster.kubectl("get", "resourceslices", "-o", "json", f"--field-selector=spec.nodeName={node}")
    return [s for s in json.loads(out.stdout)["items"] if s["spec"]["driver"] == DRIVER]


def node_labels(cluster: LocalCluster, node: str) -> dict[str, str]:
    labels: dict[str, str] = json.loads(cluster.kubectl("get", "node", node, "-o", "json").stdout)[
        "metadata"
    ]["labels"]
    return labels


LABEL = "resource.nvidia.com/computeDomain"


def pod_field(cluster: LocalCluster, namespace: str, name: str, path: str) -> str:
    result = cluster.kubectl("get", "pod", name, "-n", namespace, "-o", f"jsonpath={path}", check=False)
    return result.stdout if result.returncode == 0 else ""


def pod_claim_uid(cluster: LocalCluster, namespace: str, pod: str) -> str:
    claim_name = pod_field(cluster, namespace, pod, "{.status.resourceClaimStatuses[0].resourceClaimName}")
    return uid_of(cluster, "resourceclaim", claim_name, namespace)


def pod_gone(cluster: LocalCluster, namespace: str, pod: str) -> bool:
    return cluster.kubectl("get", "pod", pod, "-n", namespace, check=False).returncode != 0


def create_domain(
    cluster: LocalCluster, namespace: str, mode: str = "Single", *, channel: int | None = None
) -> str:
    """A ComputeDomain and (standing in for the controller) its workload claim template; its UID.

    With ``channel`` (channel isolation) the number is recorded in the domain's status first and the
    template asks for that channel only, in the controller's order (docs/channel-isolation.md §4).
    """
    apply(cluster, compute_domain("train", namespace, mode=mode))
    uid = uid_of(cluster, "computedomain", "train", namespace)
    if channel is not None:
        patch_status(
            cluster, "computedomain", "train", namespace, {"status": {"status": "Ready", "channel": channel}}
        )
    apply(cluster, channel_template(namespace, "train-channel", uid, mode, channel=channel))
    return uid


def mark_daemon_ready(cluster: LocalCluster, domain_uid: str, node: str) -> None:
    """Stand-in for the controller: record ``node``'s IMEX daemon as Ready in the domain's clique."""
    apply(
        cluster,
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomainClique",
            "metadata": {
                "name": f"{domain_uid}.{CLIQUE}",
                "namespace": DRIVER_NAMESPACE,
                "labels": {LABEL: domain_uid, "resource.nvidia.com/computeDomain.cliqueID": CLIQUE},
            },
            "daemons": [
                {
                    "nodeName": node,
                    "ipAddress": "127.100.1.200",
                    "cliqueID": CLIQUE,
                    "index": 0,
                    "status": "Ready",
                }
            ],
        },
    )
