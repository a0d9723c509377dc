"""The benchmarks' nodes: simulated (a Node, its Lease, one real plugin process each) or real.

``Fleet`` adds nodes as the job size grows, keeps their Leases fresh as kubelets do, runs and stops
their ``compute-domain-kubelet-plugin`` processes and, host-managed, each node's own host
``nvidia-imex`` (``benchlib.HostImex``: the plugin asks it for ``READY`` before preparing a channel);
``install_api`` puts in what the chart would (CRDs, DeviceClasses, the driver namespace). Without
plugins (``plugins=False``, the controller-scale bench ``rack_bench``) a node gets the daemon
ResourceSlice its plugin would publish (``imexdra_sim.builders.daemon_slice``) and nothing runs for
it. The job-start benchmark's story is in ``jobstart_bench``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from benchlib import (
    CLIQUE,
    DRIVER,
    DRIVER_NAMESPACE,
    PLUGIN_BIN,
    DraStub,
    HostImex,
    cpu_seconds,
    feature_gates,
    install_crds,
    kubectl_apply,
    peak_rss_mib,
    rss_mib,
    running,
    simulated_node,
)
from jobstart_api import Api

from imexdra.api.constants import DEVICE_CLASS_DEFAULT_CHANNEL
from imexdra.controller.render import DAEMON_SERVICE_ACCOUNT
from imexdra_sim.apinodes import NODE_LEASE_SECONDS, node_lease
from imexdra_sim.builders import daemon_device_class, daemon_slice
from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.localcluster.nodes import GPU_NODE_LABELS, NodeSpec
from imexdra_sim.localcluster.processes import free_port
from imexdra_sim.waiting import poll_async

RACK = 18
PLUGIN_MIB = 64
#: A host-managed node also runs its host IMEX (the fake nvidia-imex, a Python process).
HOST_IMEX_MIB = 32
CHANNEL_SELECTOR = (
    f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'channel' "
    f"&& device.attributes['{DRIVER}'].id == 0"
)
FLEET_LABEL = "bench.imexdra/simulated"
#: A kubelet renews its node Lease (NODE_LEASE_SECONDS) every quarter of its duration.
LEASE_RENEW_S = 10.0


def _micro_now() -> str:
    """A Lease's MicroTime, now."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node_mib(*, host_managed: bool) -> int:
    """Memory one simulated node's processes need: its plugin, and host-managed its host IMEX."""
    return PLUGIN_MIB + (HOST_IMEX_MIB if host_managed else 0)


def node_address(index: int) -> str:
    """The ``index``-th simulated node's InternalIP (a loopback address, so a process can bind it)."""
    return f"127.101.{index // 250}.{index % 250 + 1}"


def rack_clique(index: int) -> str:
    """Nodes of one 18-node rack share an NVLink clique."""
    uuid, _, _ = CLIQUE.rpartition(".")
    return f"{uuid}.{index // RACK + 1}"


def install_api(cluster: LocalCluster) -> None:
    """CRDs, the channel and daemon DeviceClasses (the chart's), the driver namespace and daemon account."""
    install_crds(cluster)
    kubectl_apply(
        cluster,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": DEVICE_CLASS_DEFAULT_CHANNEL},
            "spec": {"selectors": [{"cel": {"expression": CHANNEL_SELECTOR}}]},
        },
        daemon_device_class(),
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": DRIVER_NAMESPACE}},
    )
    kubectl_apply(
        cluster,
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": DAEMON_SERVICE_ACCOUNT, "namespace": DRIVER_NAMESPACE},
        },
    )


# -- the nodes ------------------------------------------------------------------------------------


@dataclass
class PluginNode:
    """One node's kubelet plugin process and its DRA socket."""

    name: str
    base: Path
    plugins_dir: Path
    process: subprocess.Popen[bytes]
    stub: DraStub | None = None
    channel: grpc.aio.Channel | None = None

    @property
    def socket(self) -> Path:
        return self.plugins_dir / DRIVER / "dra.sock"

    @property
    def checkpoint(self) -> Path:
        return self.plugins_dir / DRIVER / "checkpoint.json"

    def connect(self) -> DraStub:
        if self.stub is None:
            self.channel = grpc.aio.insecure_channel(f"unix://{self.socket}")
            self.stub = DraStub(self.channel)
        return self.stub

    def prepared_claims(self) -> set[str]:
        """UIDs of the claims this plugin's checkpoint records as prepared (its v1 part holds only those)."""
        try:
            data = json.loads(self.checkpoint.read_bytes())
        except (OSError, ValueError):
            return set()
        return set((data.get("v1") or {}).get("preparedClaims") or {})


@dataclass
class Fleet:
    """The cluster's nodes and one plugin process per node; ``grow`` adds nodes up to N."""

    cluster: LocalCluster
    state_dir: Path
    kubelets: bool
    host_managed: bool = True
    #: Gate ComputeDomainBindingConditions in the plugins (their channel devices carry the conditions).
    binding_conditions: bool = False
    #: One plugin process per node; without, the node's daemon ResourceSlice is published for it.
    plugins: bool = True
    #: How often each Lease is renewed (a kubelet: every 10 s; the node lifecycle's grace is 50 s).
    lease_renew_s: float = LEASE_RENEW_S
    nodes: list[PluginNode] = field(default_factory=list)
    #: How many nodes exist (without plugins, ``nodes`` stays empty).
    size: int = 0
    host_imex: list[HostImex] = field(default_factory=list)
    #: One IMEX server port for every node's host IMEX (each binds its own node address).
    host_imex_port: int = field(default_factory=free_port)
    heartbeat: asyncio.Task[None] | None = None
    renewed: dict[str, float] = field(default_factory=dict)
    #: The longest time a simulated node's Lease went unrenewed (the node lifecycle's grace is 50 s).
    renew_max_gap_s: float = 0.0

    def by_name(self) -> dict[str, PluginNode]:
        return {node.name: node for node in self.nodes}

    async def grow(self, api: Api, count: int) -> float:
        """Add nodes (and plugins) until there are ``count``; returns the seconds it took."""
        started = time.monotonic()
        new = list(range(self.size, count))
        if self.kubelets:
            specs = [
                NodeSpec(
                    name=f"node-{i}",
                    labels={**GPU_NODE_LABELS, "nvidia.com/gpu.clique": rack_clique(i)},
                    pod_cidr=f"127.100.{i + 1}.0/24",
                )
                for i in new
            ]
            await asyncio.to_thread(self.cluster.add_nodes, specs, timeout=300)
        else:
            await asyncio.gather(*(self._create_node(api, i) for i in new))
            if self.heartbeat is None:
                self.heartbeat = asyncio.create_task(self._renew_leases(api))
        self.size = max(self.size, count)
        if not self.plugins:
            return time.monotonic() - started
        batch = 8  # two cores: start plugins a few at a time
        for first in range(0, len(new), batch):
            indexes = new[first : first + batch]
            if self.host_managed:
                # A real host-managed node's nvidia-imex.service is up before its kubelet plugin.
                host_imex = [self._start_host_imex(i) for i in indexes]
                await asyncio.gather(*(imex.wait_ready() for imex in host_imex))
            started_now = [self._start_plugin(i) for i in indexes]
            await asyncio.gather(*(self._wait_socket(node) for node in started_now))
        await api.until_slices(count)
        return time.monotonic() - started

    async def _create_node(self, api: Api, index: int) -> None:
        name = f"node-{index}"
        labels = {
            **GPU_NODE_LABELS,
            "kubernetes.io/hostname": name,
            "nvidia.com/gpu.clique": rack_clique(index),
            FLEET_LABEL: "true",
        }
        await api.post(
            "/api/v1/nodes",
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}},
        )
        capacity = {"cpu": "144", "memory": "1700Gi", "pods": "110", "nvidia.com/gpu": "4"}
        status = {
            "status": {
                "capacity": capacity,
                "allocatable": capacity,
                "conditions": [
                    {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "simulated node"}
                ],
                "addresses": [{"type": "InternalIP", "address": node_address(index)}],
            }
        }
        await api.patch(f"/api/v1/nodes/{name}/status", status)
        lease = node_lease(name, NODE_LEASE_SECONDS, _micro_now())
        await api.post("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", lease)
        self.renewed[name] = time.monotonic()
        if not self.plugins:
            await api.post("/apis/resource.k8s.io/v1/resourceslices", daemon_slice(name))

    async def _renew_leases(self, api: Api) -> None:
        """Renew every simulated node's Lease each ``lease_renew_s``, spread over the period, as kubelets do.

        From the node's creation on, before its plugin runs: a node whose Lease lapses for the node
        lifecycle controller's 50 s grace turns Unknown and stays so (only a kubelet posts Ready).
        Each renewal is its own task, as each kubelet renews on its own: a slow apiserver answer
        delays that one node, not the ones after it.
        """
        pending: set[asyncio.Task[None]] = set()
        while True:
            names = list(self.renewed) or ["node-0"]
            for name in names:
                task = asyncio.create_task(self._renew(api, name))
                pending.add(task)
                task.add_done_callback(pending.discard)
                await asyncio.sleep(self.lease_renew_s / len(names))

    async def _renew(self, api: Api, name: str) -> None:
        with contextlib.suppress(Exception):
            await api.patch(
                f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}",
                {"spec": {"renewTime": _micro_now()}},
            )
            now = time.monotonic()
            if name in self.renewed:
                self.renew_max_gap_s = max(self.renew_max_gap_s, now - self.renewed[name])
            self.renewed[name] = now

    def _base(self, index: int) -> Path:
        """Where the ``index``-th node's hardware, plugin state and host IMEX files live."""
        name = f"node-{index}"
        return self.cluster.node(name).host_dir / "imexdra" if self.kubelets else self.state_dir / name

    def _start_host_imex(self, index: int) -> HostImex:
        """Write the node's hardware (the host IMEX runs its driver root's nvidia-imex) and start it."""
        base = self._base(index)
        simulated_node(base, f"node-{index}", rack_clique(index))
        imex = HostImex(base, node_address(index), self.host_imex_port)
        imex.start()
        self.host_imex.append(imex)
        return imex

    def _start_plugin(self, index: int) -> PluginNode:
        name = f"node-{index}"
        base = self._base(index)
        env = simulated_node(base, name, rack_clique(index))
        if self.kubelets:
            kubelet_node = self.cluster.node(name)
            env["KUBELET_REGISTRAR_DIRECTORY_PATH"] = str(kubelet_node.registry_dir)
            env["KUBELET_PLUGINS_DIRECTORY_PATH"] = str(kubelet_node.plugins_dir)
        env |= {"KUBECONFIG": str(self.cluster.kubeconfig)}
        env |= {
            "FEATURE_GATES": feature_gates(
                host_managed=self.host_managed, binding_conditions=self.binding_conditions
            ),
            "IMEX_MODE": "hostManaged" if self.host_managed else "driverManaged",
        }
        with (base / "plugin.log").open("ab") as log:
            process = subprocess.Popen(
                [str(PLUGIN_BIN)], env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT
            )
        node = PluginNode(name, base, Path(env["KUBELET_PLUGINS_DIRECTORY_PATH"]), process)
        self.nodes.append(node)
        return node

    async def _wait_socket(self, node: PluginNode, within: float = 120) -> None:
        await poll_async(
            f"the plugin of {node.name} serving {node.socket} (see {node.base})",
            node.socket.exists,
            within=within,
            interval=0.1,
            require=running(node.process, f"the plugin of {node.name} (see {node.base})"),
        )

    def rss(self) -> dict[str, float]:
        if not self.nodes:
            return {"plugins": 0}
        peaks = [peak_rss_mib(node.process.pid) for node in self.nodes]
        now = [rss_mib(node.process.pid)["VmRSS"] for node in self.nodes]
        return {
            "plugins": len(self.nodes),
            "peak_max_mib": max(peaks),
            "peak_mean_mib": round(sum(peaks) / len(peaks), 1),
            "now_total_mib": round(sum(now), 1),
        }

    def cpu_seconds(self) -> float:
        return sum(cpu_seconds(node.process.pid) for node in self.nodes)

    async def close(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat.cancel()
            await asyncio.gather(self.heartbeat, return_exceptions=True)
        for node in self.nodes:
            if node.channel is not None:
                await node.channel.close()
            if node.process.poll() is None:
                node.process.send_signal(signal.SIGTERM)
        for node in self.nodes:
            try:
                node.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                node.process.kill()
        for imex in self.host_imex:
            imex.stop()
