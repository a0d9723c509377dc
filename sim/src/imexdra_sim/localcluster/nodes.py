"""One simulated node: its own container runtime and a real kubelet, with its own root dir and ports.

The runtime is fakecri (containers as host processes; the scale and driver tiers) or a real
containerd with runc (``localcluster.containerd``, docs/node-runtime.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from imexdra_sim.localcluster.binaries import Binaries
from imexdra_sim.localcluster.cgroups import NodeCgroup, node_cgroup
from imexdra_sim.localcluster.containerd import shim_pids, start_containerd
from imexdra_sim.localcluster.dns import CLUSTER_DNS_IP, CLUSTER_DOMAIN
from imexdra_sim.localcluster.fabric import Fabric
from imexdra_sim.localcluster.machine import Machine, mount_commands, write_machine
from imexdra_sim.localcluster.processes import (
    ClusterStartError,
    ManagedProcess,
    Supervisor,
    free_port,
    kill_trees,
    wait_until,
)
from imexdra_sim.localcluster.registry import Registry

GPU_NODE_LABELS = {
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.product": "NVIDIA-GB200",
    "nvidia.com/gpu.count": "4",
}
"""Labels GPU Feature Discovery puts on a GB200 node (the clique label is added per node)."""


@dataclass(frozen=True, slots=True)
class HostImage:
    """A container image that fakecri runs as a host process instead of faking it."""

    entrypoint: tuple[str, ...] = ()
    path: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    force_env: dict[str, str] = field(default_factory=dict)
    """Wins over the pod's env; the cluster sets KUBERNETES_SERVICE_HOST/PORT to the real apiserver."""


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """What a simulated node looks like to the cluster."""

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    pod_cidr: str = ""
    """fakecri: an IPv4 /24 on loopback (e.g. ``127.100.1.0/24``) each pod gets its own address from.
    containerd nodes leave it empty: the cluster's fabric gives each one a routable /24."""
    runtime: Literal["fakecri", "containerd"] = "fakecri"
    taints: tuple[str, ...] = ()
    """Taints the kubelet registers the node with, as ``key[=value]:Effect``."""
    machine: Machine | None = None
    """The CPUs and memory the node's kubelet finds (``localcluster.machine``); None: the test machine's."""


@dataclass(frozen=True, slots=True)
class NodeNetwork:
    """A containerd node's place on the cluster's fabric, kube-proxy's identity, the registry to pull from."""

    fabric: Fabric
    index: int
    proxy_kubeconfig: Path
    registry: Registry | None = None
    """The cluster's registry (``localcluster.registry``), if any: the node pulls the project's image."""


@dataclass
class Node:
    """A running simulated node and where to find its state."""

    spec: NodeSpec
    directory: Path
    kubelet_port: int
    healthz_port: int
    processes: list[ManagedProcess] = field(default_factory=list)
    pod_cidr: str = ""
    """Where this node's pods get their addresses (set when the node starts)."""
    cgroup: NodeCgroup | None = None
    """A containerd node's own cgroup subtree (``localcluster.cgroups``; set when the node starts)."""

    @property
    def name(self) -> str:
        """Node name."""
        return self.spec.name

    @property
    def root_dir(self) -> Path:
        """The kubelet's --root-dir; plays the node's /var/lib/kubelet for host-process pods."""
        return self.directory / "kubelet"

    @property
    def registry_dir(self) -> Path:
        """Where the kubelet watches for plugin registration sockets."""
        return self.root_dir / "plugins_registry"

    @property
    def plugins_dir(self) -> Path:
        """Where DRA plugins put their node-service sockets."""
        return self.root_dir / "plugins"

    @property
    def containerd_dir(self) -> Path:
        """The node's containerd config, root, state and socket (containerd nodes)."""
        return self.directory / "containerd"

    @property
    def cri_socket(self) -> Path:
        """The CRI socket the kubelet talks to: fakecri's or containerd's."""
        if self.spec.runtime == "containerd":
            return self.containerd_dir / "containerd.sock"
        return self.directory / "cri.sock"

    @property
    def cri_record(self) -> Path:
        """JSON lines of every container call fakecri saw."""
        return self.directory / "cri-record.jsonl"

    @property
    def host_dir(self) -> Path:
        """Per-node stand-ins for host paths (e.g. ``/var/run/cdi``, ``/proc/devices``)."""
        return self.directory / "host"

    def cri_records(self, event: str | None = None) -> list[dict[str, Any]]:
        """Parse the fakecri record, optionally only entries of one ``event``."""
        if not self.cri_record.exists():
            return []
        records = [json.loads(line) for line in self.cri_record.read_text().splitlines() if line]
        return [r for r in records if event is None or r.get("event") == event]

    def kubelet_config(self, node_ip: str, *, lease_seconds: int | None = None) -> dict[str, Any]:
        """The KubeletConfiguration for this node (cgroup v1, no swap, fake runtime).

        ``lease_seconds`` shortens the node lease (the kubelet renews it every quarter of that), for a
        cluster whose node lifecycle controller is told to give up on silent nodes sooner.
        """
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "containerRuntimeEndpoint": f"unix://{self.cri_socket}",
            "cgroupDriver": "cgroupfs",
            "cgroupsPerQOS": False,
            "enforceNodeAllocatable": [],
            "failSwapOn": False,
            "failCgroupV1": False,
            "localStorageCapacityIsolation": False,
            "address": node_ip,
            "port": self.kubelet_port,
            "healthzPort": self.healthz_port,
            "healthzBindAddress": "127.0.0.1",
            "readOnlyPort": 0,
            "podLogsDir": str(self.directory / "pod-logs"),
            "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "evictionHard": {"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "serializeImagePulls": False,
            "nodeStatusUpdateFrequency": "5s",
            "syncFrequency": "10s",
            "fileCheckFrequency": "5s",
            "volumeStatsAggPeriod": "0s",
            "maxPods": 110,
            "resolvConf": "",
            "registerWithTaints": [_taint(t) for t in self.spec.taints],
            **({"nodeLeaseDurationSeconds": lease_seconds} if lease_seconds else {}),
            # Pods in network namespaces of their own resolve Services through the cluster's CoreDNS
            # (localcluster.dns); fakecri's host-process pods share the machine's resolver.
            **(
                {"clusterDNS": [CLUSTER_DNS_IP], "clusterDomain": CLUSTER_DOMAIN}
                if self.spec.runtime == "containerd"
                else {}
            ),
        }


def _taint(text: str) -> dict[str, str]:
    """``key[=value]:Effect`` as a KubeletConfiguration taint."""
    key_value, _, effect = text.rpartition(":")
    key, _, value = key_value.partition("=")
    if not key or effect not in ("NoSchedule", "PreferNoSchedule", "NoExecute"):
        raise ClusterStartError(f"taint {text!r}: want key[=value]:NoSchedule|PreferNoSchedule|NoExecute")
    return {"key": key, "effect": effect, **({"value": value} if value else {})}


def start_node(
    node: Node,
    *,
    binaries: Binaries,
    supervisor: Supervisor,
    kubeconfig: Path,
    node_ip: str,
    host_images: dict[str, HostImage],
    host_path_map: dict[str, Path],
    cdi_dirs: list[Path],
    apiserver_port: int,
    network: NodeNetwork | None = None,
    lease_seconds: int | None = None,
) -> None:
    """Start the runtime and the kubelet of ``node``; readiness is checked by the caller.

    A containerd node needs ``network``: its namespace joins the fabric and runs kube-proxy, and its
    kubelet runs in it too (``node_ip`` is then its fabric address). Nodes may be started concurrently.
    ``lease_seconds``: the kubelet's node lease duration (``Node.kubelet_config``).
    """
    node.directory.mkdir(parents=True, exist_ok=True)
    node.root_dir.mkdir(parents=True, exist_ok=True)
    node.host_dir.mkdir(parents=True, exist_ok=True)
    machine = write_machine(node.spec.machine, node.directory / "machine") if node.spec.machine else {}
    namespaces: list[str] = []
    in_cgroup: list[str] = []
    if node.spec.runtime == "containerd":
        if network is None or node.spec.pod_cidr:
            raise ClusterStartError(
                f"node {node.name}: a containerd node takes its pod CIDR from the cluster's fabric; "
                "leave NodeSpec.pod_cidr empty"
            )
        node.pod_cidr = network.fabric.pod_cidr(network.index)
        cgroup = node.cgroup = node_cgroup(node.directory.parent.name, node.name)
        runtime = start_containerd(
            node.containerd_dir,
            name=node.name,
            kubelet_root=node.root_dir,
            pod_cidr=node.pod_cidr,
            binds=host_path_map,
            machine=machine,
            cgroup=cgroup,
            binaries=binaries,
            supervisor=supervisor,
            registry=network.registry,
        )
        network.fabric.attach(network.index, runtime.popen.pid)
        namespaces = [f"--net=/proc/{runtime.popen.pid}/ns/net"]
        # Every process of the node lives in its cgroup; the kubelet also sees the node's hierarchies.
        in_cgroup = cgroup.enter_argv()
        node.processes.append(runtime)
        node.processes.append(
            supervisor.start(
                f"{node.name}-kube-proxy",
                [
                    *in_cgroup,
                    "nsenter",
                    *namespaces,
                    "--",
                    str(binaries.path("kube-proxy")),
                    f"--kubeconfig={network.proxy_kubeconfig}",
                    f"--hostname-override={node.name}",
                    "--proxy-mode=iptables",
                    f"--cluster-cidr={network.fabric.cluster_cidr}",
                    # Conntrack limits are the machine's (set in its first namespace); leave them be.
                    "--conntrack-max-per-core=0",
                    "--conntrack-tcp-timeout-established=0",
                    "--conntrack-tcp-timeout-close-wait=0",
                    "--v=1",
                ],
                # kube-proxy runs iptables from PATH; tools/k8s/build.sh puts Debian's beside it.
                env={"PATH": binaries.search_path()},
            )
        )
    else:
        runtime = _start_fakecri(
            node,
            binaries=binaries,
            supervisor=supervisor,
            host_images=host_images,
            host_path_map=host_path_map,
            cdi_dirs=cdi_dirs,
            apiserver_port=apiserver_port,
            machine=machine,
        )
        node.pod_cidr = node.spec.pod_cidr
        node.processes.append(runtime)
    config_path = node.directory / "kubelet-config.yaml"
    config = node.kubelet_config(node_ip, lease_seconds=lease_seconds)
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    labels = ",".join(f"{k}={v}" for k, v in sorted(node.spec.labels.items()))
    kubelet_argv = [
        *in_cgroup,
        # The kubelet joins the runtime's mount namespace, where /var/lib/kubelet is this node's root.
        "nsenter",
        f"--mount=/proc/{runtime.popen.pid}/ns/mnt",
        *([f"--cgroup=/proc/{runtime.popen.pid}/ns/cgroup"] if in_cgroup else []),
        *namespaces,
        # Entering a mount namespace resets the working directory to "/"; keep the kubelet's relative
        # file operations (if any) inside its node directory, never on the test host's root.
        f"--wd={node.directory}",
        "--",
        str(binaries.path("kubelet")),
        f"--config={config_path}",
        f"--kubeconfig={kubeconfig}",
        f"--root-dir={node.root_dir}",
        f"--hostname-override={node.name}",
        f"--node-ip={node_ip}",
        "--v=2",
    ]
    if labels:
        kubelet_argv.append(f"--node-labels={labels}")
    node.processes.append(supervisor.start(f"{node.name}-kubelet", kubelet_argv))


def _start_fakecri(
    node: Node,
    *,
    binaries: Binaries,
    supervisor: Supervisor,
    host_images: dict[str, HostImage],
    host_path_map: dict[str, Path],
    cdi_dirs: list[Path],
    apiserver_port: int,
    machine: dict[str, Path],
) -> ManagedProcess:
    """Start the node's fakecri in a private mount namespace; return it once its socket is up.

    ``machine``: bind mounts that give the namespace the node's CPUs and memory (may be empty).
    """
    exec_config = node.directory / "fakecri-images.json"
    exec_config.write_text(
        json.dumps(
            {
                "images": {
                    image: {
                        "entrypoint": list(h.entrypoint),
                        "path": list(h.path),
                        "env": h.env,
                        # In-cluster config inside host-process pods: the Service IP is not routable
                        # here (no kube-proxy), so point it at the apiserver's loopback address.
                        "forceEnv": {
                            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
                            "KUBERNETES_SERVICE_PORT": str(apiserver_port),
                            **h.force_env,
                        },
                    }
                    for image, h in host_images.items()
                }
            },
            indent=2,
        )
    )
    path_map = {"/var/lib/kubelet": node.root_dir, **host_path_map}
    fakecri_argv = [
        str(binaries.path("fakecri")),
        f"--listen=unix://{node.cri_socket}",
        f"--record={node.cri_record}",
        f"--exec-config={exec_config}",
        "--host-path-map=" + ",".join(f"{k}={v}" for k, v in path_map.items()),
        f"--node={node.name}",
    ]
    if node.spec.pod_cidr:
        fakecri_argv.append(f"--pod-cidr={node.spec.pod_cidr}")
    if cdi_dirs:
        fakecri_argv.append("--cdi-dirs=" + ",".join(str(d) for d in cdi_dirs))
    fakecri = supervisor.start(f"{node.name}-fakecri", [*_node_namespace(node, machine), *fakecri_argv])
    wait_until(f"{node.name} fakecri socket", node.cri_socket.exists, timeout=30, process=fakecri)
    return fakecri


def _node_namespace(node: Node, machine: dict[str, Path]) -> list[str]:
    """Argv prefix that runs a command in a new private mount namespace: the simulated node's host.

    Inside it, ``/var/lib/kubelet`` is the node's own root dir, so paths a DRA plugin reports from
    inside its pod (``/var/lib/kubelet/plugins/<driver>/dra.sock``) mean the same to this node's kubelet,
    as on a real node, and ``machine``'s files stand for the kernel's CPU and memory view. Mounts the
    kubelet makes (volume tmpfs) stay in the namespace and vanish with it.
    """
    setup = " && ".join(
        [
            "mkdir -p /var/lib/kubelet",
            'mount --bind "$0" /var/lib/kubelet',
            *mount_commands(machine),
            'exec "$@"',
        ]
    )
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", setup, str(node.root_dir)]


def new_node(spec: NodeSpec, run_dir: Path) -> Node:
    """Allocate the directory and ports of a node that is not started yet."""
    return Node(spec=spec, directory=run_dir / spec.name, kubelet_port=free_port(), healthz_port=free_port())


def power_off(node: Node) -> list[int]:
    """Stop every process of ``node`` at once, as a node losing power does; return the PIDs killed.

    The kubelet, the runtime, kube-proxy, host services and every container (fakecri's children, or
    containerd's shims and what they hold) die together by SIGKILL (``processes.kill_trees``): nothing
    gets a chance to clean up or to tell the API server. Files stay, as disks do.
    """
    roots = [p.popen.pid for p in node.processes if p.alive()]
    if node.spec.runtime == "containerd":
        roots += shim_pids(node.cri_socket)
    killed = kill_trees(roots)
    for process in node.processes:
        process.popen.wait(timeout=10)
    return killed


def forget_processes(node: Node, supervisor: Supervisor) -> None:
    """Drop a powered-off node's dead processes and its runtime's stale socket, before it starts again.

    A leftover socket file would pass the runtime's readiness wait before the new runtime listens.
    """
    for process in node.processes:
        supervisor.forget(process)
    node.processes.clear()
    node.cri_socket.unlink(missing_ok=True)
