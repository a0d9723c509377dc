"""Job start at scale: submit → every worker's channel claim prepared, 4 to 256 nodes (a benchmark).

What one run measures: a user submits a ComputeDomain and a ``batch/v1`` Job of N pods
(parallelism = completions = N), each pod taking one IMEX channel through the domain's
ResourceClaimTemplate; the clock stops when the channel claim of every pod has been prepared by the
kubelet plugin of the node the pod landed on (and the domain is Ready). Everything between is the real
thing: the real ``compute-domain-controller`` process (the chart's default client rate limit 5 QPS /
burst 10) creates the template and marks the domain Ready, kube-controller-manager's Job controller
creates the pods and its resourceclaim controller their claims, kube-scheduler allocates each claim
through DRA from the ResourceSlices the plugins published (channel-0 is one device per node, so the N
pods land on N different nodes) and binds the pod. Reported per N: the total time and its breakdown
(domain Ready, all pods created, all claims allocated, all pods bound, all prepared), the apiserver's
409 and 429 answers, the API requests by verb and resource, the controller's own count of its writes,
CPU seconds per component and peak RSS of the controller and of the plugins.

Two IMEX modes (``--mode``, default ``both``):

- host-managed (``HostManagedIMEX``): no IMEX daemons; a channel prepare needs only the domain.
- driver-managed (the default mode of the driver): a worker's channel prepare labels its node, the
  controller's per-domain DaemonSet then gets a daemon pod on that node (real DaemonSet controller,
  resourceclaim controller and scheduler, the daemon claim prepared by the node's real plugin), the
  daemon announces its clique on its pod and becomes Ready, the controller publishes the node Ready in
  the domain's ComputeDomainClique, and the plugin's retrying channel prepare sees it and succeeds.
  Reported in addition, per node and as first/last over nodes: daemon pod created, bound, daemon claim
  prepared, Running, clique label set, listed in its clique, Ready, published Ready — and the p50 and
  max of each step between them (``daemons.steps_per_node``), which is where the time goes.

Three series:

- ``kubelets`` (host-managed): real kubelets (on fakecri) for N ≤ ``--max-kubelets`` (default 18:
  what this 2-core machine holds next to the control plane). The plugin runs as a host process per
  node, registered with that node's kubelet through its plugin registry, and the kubelet itself calls
  NodePrepareResources; "prepared" is read off each plugin's checkpoint (the claim's state
  ``PrepareCompleted``, polled every 50 ms), and "pods Running" is reported next to it.
- ``simulated`` (host-managed) and ``simulated_driver_managed``: for every N, a node simulator. Each
  node is a Node object (GB200 labels, clique label per 18-node rack, status Ready with allocatable
  capacity) with a Lease renewed every 10 s as a kubelet does (without it the node lifecycle
  controller would mark the nodes unreachable and flip every pod on them, daemon pods included, to
  NotReady), and one real ``compute-domain-kubelet-plugin`` process of its own (its own state dir,
  fake NVML, ``/proc/devices`` and driver root, its own DRA socket, upstream's client rate limit
  5 QPS / burst 10). The simulator then does what a kubelet does for a pod bound to its node: it
  watches pods and claims, and once a pod is bound and its claim is reserved for it, it calls that
  node's plugin ``NodePrepareResources`` over the plugin's gRPC socket with the kubelet's 45 s
  timeout; a claim left out of the answer (the plugin's own 45 s retry budget ran out) or failed is
  retried after the kubelet's pod-sync backoff, 10–15 s (``daemonsim.kubelet_prepare``). Then it
  reports the pod Running. Driver-managed, it also plays kubelet, container runtime and daemon of the
  IMEX daemon pods (``daemonsim.DaemonKubelet``: prepare the daemon claim through the node's plugin,
  Running with an IP, the clique label set by the real daemon's code, Ready at the first startup-probe
  tick after the controller listed the node and ``--imex-formation-seconds`` passed). No IMEX runs, so
  real IMEX formation adds its own time to every driver-managed figure. On teardown it unprepares every
  claim over the socket and deletes the pods with grace period 0 (what a kubelet confirms). Nodes are
  added as N grows, so the run for N has exactly N nodes and N plugins.

kube-controller-manager and kube-scheduler run with their default client rate limits (20 and 50 QPS),
as ``LocalCluster`` starts them: for 256 pods the resourceclaim controller alone needs 512 requests
(create the claim, record it in the pod's status), which bounds the job start from below at ≈ 25 s
on any driver; driver-managed doubles that (every daemon pod has a claim too). ``--profile-nodes``
(default 18) records the controller and node-0's plugin with ``py-spy`` (non-blocking, 100 Hz) during
the simulated runs of that size and reports the hottest functions. ``--controller-command "<cmd>"``
runs another controller implementation against the same nodes and workload after ours and reports
ours/other ratios (placeholders: see ``--help``).

Targets: 18-node job ≤ 10 s; 256 pods ≤ 60 s with 0 × 429 and 0 × 409. Output: JSON on stdout and in
``bench/results/jobstart_bench.json``, plot in ``bench/results/jobstart_bench.png``.

Run: ``.venv/bin/python bench/jobstart_bench.py [--nodes 4,18,64,144,256] [--mode both] [--quick]``
after ``make bench`` (``--quick``: 4 and 18 nodes, no kubelet series). One plugin process holds
≈ 64 MiB, so 256 of them need ≈ 16 GiB; the run refuses sizes whose plugins would not fit in the
memory available (each mode's fleet is stopped before the next one starts).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
import httpx2
from benchlib import (
    CLIQUE,
    CONTROLLER_COMMAND_HELP,
    DRIVER,
    DRIVER_NAMESPACE,
    OUR_CONTROLLER_COMMAND,
    PLUGIN_BIN,
    RESULTS,
    ControllerProcess,
    Samples,
    apiserver_metrics,
    cpu_seconds,
    install_crds,
    kubectl_apply,
    peak_rss_mib,
    percentile,
    rss_mib,
    simulated_node,
)
from daemonsim import DAEMON_STAGES, DaemonKubelet, claim_reserved_for, kubelet_prepare, kubelet_unprepare
from lightkube import AsyncClient
from lightkube.config.kubeconfig import KubeConfig
from plotting import write_jobstart_plot

from imexdra.api.constants import DEVICE_CLASS_DEFAULT_CHANNEL
from imexdra.common.kube import http_client
from imexdra.controller.render import DAEMON_SERVICE_ACCOUNT
from imexdra.kubeletplugin._pb import dra_v1_pb2_grpc as dra_grpc
from imexdra_sim.apinodes import NODE_LEASE_SECONDS, node_lease
from imexdra_sim.builders import daemon_device_class
from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.localcluster.nodes import GPU_NODE_LABELS, NodeSpec

TARGETS_S = {18: 10.0, 256: 60.0}
DEFAULT_NODES = (4, 18, 64, 144, 256)
QUICK_NODES = (4, 18)
RACK = 18
PLUGIN_MIB = 64
CHANNEL_SELECTOR = (
    f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'channel' "
    f"&& device.attributes['{DRIVER}'].id == 0"
)
FLEET_LABEL = "bench.imexdra/simulated"
#: What our controller and plugins write (the plugins label nodes in driver-managed mode).
DRIVER_RESOURCES = (
    "computedomains",
    "computedomaincliques",
    "resourceclaimtemplates",
    "resourceslices",
    "nodes",
)
CLAIM = "channel"
#: A kubelet renews its node Lease (NODE_LEASE_SECONDS) every quarter of its duration.
LEASE_RENEW_S = 10.0


def _micro_now() -> str:
    """A Lease's MicroTime, now."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


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


# -- the workload ---------------------------------------------------------------------------------


def compute_domain(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": name},
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}}},
    }


def job(name: str, pods: int) -> dict[str, Any]:
    """N workers, one channel claim each from the domain's template; they tolerate every taint."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "restartPolicy": "Never",
                    "tolerations": [{"operator": "Exists"}],
                    "resourceClaims": [{"name": CLAIM, "resourceClaimTemplateName": f"{name}-channel"}],
                    "containers": [
                        {
                            "name": "worker",
                            "image": "imexdra.test/worker:bench",
                            "command": ["sleep", "3600"],
                            "resources": {"claims": [{"name": CLAIM}]},
                        }
                    ],
                },
            },
        },
    }


# -- the nodes ------------------------------------------------------------------------------------


@dataclass
class PluginNode:
    """One node's kubelet plugin process and its DRA socket."""

    name: str
    base: Path
    plugins_dir: Path
    process: subprocess.Popen[bytes]
    stub: dra_grpc.DRAPluginStub | None = None
    channel: grpc.aio.Channel | None = None

    @property
    def socket(self) -> Path:
        return self.plugins_dir / DRIVER / "dra.sock"

    @property
    def checkpoint(self) -> Path:
        return self.plugins_dir / DRIVER / "checkpoint.json"

    def connect(self) -> dra_grpc.DRAPluginStub:
        if self.stub is None:
            self.channel = grpc.aio.insecure_channel(f"unix://{self.socket}")
            self.stub = dra_grpc.DRAPluginStub(self.channel)
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
    nodes: list[PluginNode] = field(default_factory=list)
    heartbeat: asyncio.Task[None] | None = None
    renewed: dict[str, float] = field(default_factory=dict)
    #: The longest time a simulated node's Lease went unrenewed (the node lifecycle's grace is 50 s).
    renew_max_gap_s: float = 0.0

    def by_name(self) -> dict[str, PluginNode]:
        return {node.name: node for node in self.nodes}

    async def grow(self, api: Api, count: int) -> float:
        """Add nodes (and plugins) until there are ``count``; returns the seconds it took."""
        started = time.monotonic()
        new = list(range(len(self.nodes), count))
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
        batch = 8  # two cores: start plugins a few at a time
        for first in range(0, len(new), batch):
            started_now = [self._start_plugin(i) for i in new[first : first + batch]]
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
                "addresses": [{"type": "InternalIP", "address": f"127.101.{index // 250}.{index % 250 + 1}"}],
            }
        }
        await api.patch(f"/api/v1/nodes/{name}/status", status)
        lease = node_lease(name, NODE_LEASE_SECONDS, _micro_now())
        await api.post("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", lease)
        self.renewed[name] = time.monotonic()

    async def _renew_leases(self, api: Api) -> None:
        """Renew every simulated node's Lease each 10 s, spread over the period, as kubelets do.

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
                await asyncio.sleep(LEASE_RENEW_S / len(names))

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

    def _start_plugin(self, index: int) -> PluginNode:
        name = f"node-{index}"
        if self.kubelets:
            kubelet_node = self.cluster.node(name)
            base = kubelet_node.host_dir / "imexdra"
            env = simulated_node(base, name, rack_clique(index))
            env["KUBELET_REGISTRAR_DIRECTORY_PATH"] = str(kubelet_node.registry_dir)
            env["KUBELET_PLUGINS_DIRECTORY_PATH"] = str(kubelet_node.plugins_dir)
        else:
            base = self.state_dir / name
            env = simulated_node(base, name, rack_clique(index))
        env |= {"KUBECONFIG": str(self.cluster.kubeconfig)}
        if self.host_managed:
            env |= {"FEATURE_GATES": "HostManagedIMEX=true", "IMEX_MODE": "hostManaged"}
        else:
            env |= {"FEATURE_GATES": "", "IMEX_MODE": "driverManaged"}
        with (base / "plugin.log").open("ab") as log:
            process = subprocess.Popen(
                [str(PLUGIN_BIN)], env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT
            )
        node = PluginNode(name, base, Path(env["KUBELET_PLUGINS_DIRECTORY_PATH"]), process)
        self.nodes.append(node)
        return node

    async def _wait_socket(self, node: PluginNode, within: float = 120) -> None:
        deadline = time.monotonic() + within
        while not node.socket.exists():
            if node.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"plugin of {node.name} did not serve {node.socket}; see {node.base}")
            await asyncio.sleep(0.1)

    def rss(self) -> dict[str, float]:
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


# -- the API --------------------------------------------------------------------------------------


class Api:
    """Raw JSON requests and watches on the admin connection (no typed models: less bench CPU)."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.client = AsyncClient(
            config=KubeConfig.from_file(cluster.kubeconfig), field_manager="jobstart-bench"
        )
        self.http = http_client(self.client)
        self.watch_restarts = 0

    async def close(self) -> None:
        await self.client.close()

    async def get(self, path: str, **params: str) -> dict[str, Any]:
        response = await self.http.get(path, params=params)
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    async def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = await self.http.post(path, json=body)
        response.raise_for_status()
        result: dict[str, Any] = response.json()
        return result

    async def patch(self, path: str, body: dict[str, Any]) -> None:
        headers = {"Content-Type": "application/merge-patch+json"}
        response = await self.http.patch(path, content=json.dumps(body), headers=headers)
        response.raise_for_status()

    async def delete(self, path: str, **params: str) -> None:
        response = await self.http.delete(path, params=params)
        if response.status_code != 404:
            response.raise_for_status()

    async def watch(
        self, path: str, on_event: Callable[[str, dict[str, Any]], None], synced: asyncio.Event
    ) -> None:
        """List, then watch from the list's resourceVersion; every object goes to ``on_event``.

        A watch the apiserver ends (e.g. it closes a watcher that fell behind while the machine is
        saturated) is resumed by a fresh list and watch, as an informer would; ``watch_restarts``
        counts them (an object's stage time may then be late by the gap).
        """
        while True:
            try:
                listing = await self.get(path)
                for item in listing["items"]:
                    on_event("ADDED", item)
                synced.set()
                params = {"watch": "1", "resourceVersion": listing["metadata"]["resourceVersion"]}
                async with self.http.stream("GET", path, params=params, timeout=None) as response:
                    async for line in response.aiter_lines():
                        if not line:
                            continue
                        event = json.loads(line)
                        if event["type"] == "ERROR":  # e.g. 410 Gone: list again
                            break
                        on_event(event["type"], event["object"])
            except (httpx2.HTTPError, ValueError):
                pass
            self.watch_restarts += 1
            await asyncio.sleep(0.2)

    async def until_slices(self, count: int, within: float = 300) -> None:
        deadline = time.monotonic() + within
        while True:
            listing = await self.get(
                "/apis/resource.k8s.io/v1/resourceslices", fieldSelector=f"spec.driver={DRIVER}"
            )
            if len(listing["items"]) >= count:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(listing['items'])} of {count} ResourceSlices published")
            await asyncio.sleep(0.5)


# -- one job start --------------------------------------------------------------------------------


@dataclass
class JobStart:
    """What the watches saw of one job start, as seconds since the submit."""

    pods: int
    t0: float = 0.0
    domain_ready: float | None = None
    #: The domain's latest turn to Ready (driver-managed: Ready, NotReady as daemons join, Ready again).
    domain_ready_last: float | None = None
    domain_is_ready: bool = False
    pod_created: dict[str, float] = field(default_factory=dict)
    pod_bound: dict[str, float] = field(default_factory=dict)
    pod_running: dict[str, float] = field(default_factory=dict)
    claim_allocated: dict[str, float] = field(default_factory=dict)
    prepared: dict[str, float] = field(default_factory=dict)
    prepare_ms: list[float] = field(default_factory=list)
    prepare_errors: int = 0
    pods_seen: dict[str, dict[str, Any]] = field(default_factory=dict)
    claims_seen: dict[str, dict[str, Any]] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def on_domain(self, _kind: str, obj: dict[str, Any]) -> None:
        ready = (obj.get("status") or {}).get("status") == "Ready"
        if ready and not self.domain_is_ready:
            self.domain_ready_last = self.now()
            if self.domain_ready is None:
                self.domain_ready = self.domain_ready_last
        self.domain_is_ready = ready
        self.changed.set()

    def on_pod(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            return
        name = obj["metadata"]["name"]
        self.pods_seen[name] = obj
        self.pod_created.setdefault(name, self.now())
        if obj["spec"].get("nodeName"):
            self.pod_bound.setdefault(name, self.now())
        if (obj.get("status") or {}).get("phase") == "Running":
            self.pod_running.setdefault(name, self.now())
        self.changed.set()

    def on_claim(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            return
        name = obj["metadata"]["name"]
        self.claims_seen[name] = obj
        if (obj.get("status") or {}).get("allocation"):
            self.claim_allocated.setdefault(name, self.now())
        self.changed.set()

    def ready_to_prepare(self) -> list[tuple[str, str, dict[str, Any]]]:
        """(pod, node, claim) for bound pods whose claim is reserved for them, not yet handed over."""
        ready = []
        for name, pod in self.pods_seen.items():
            node = pod["spec"].get("nodeName")
            if not node or name in self.prepared:
                continue
            claim = claim_reserved_for(pod, CLAIM, self.claims_seen)
            if claim is not None:
                ready.append((name, node, claim))
        return ready

    def breakdown(self) -> dict[str, Any]:
        def last(times: dict[str, float]) -> float | None:
            return round(max(times.values()), 2) if len(times) >= self.pods else None

        return {
            "domain_ready_s": None if self.domain_ready is None else round(self.domain_ready, 2),
            "domain_ready_last_s": None
            if self.domain_ready_last is None
            else round(self.domain_ready_last, 2),
            "all_pods_created_s": last(self.pod_created),
            "all_claims_allocated_s": last(self.claim_allocated),
            "all_pods_bound_s": last(self.pod_bound),
            "all_prepared_s": last(self.prepared),
        }


class Simulator:
    """The kubelet's part for pods bound to simulated nodes: prepare over the socket, report Running.

    Driver-managed, ``daemons`` also plays kubelet, runtime and daemon of the IMEX daemon pods.
    """

    def __init__(
        self, api: Api, fleet: Fleet, namespace: str, state: JobStart, *, formation_s: float = 0.0
    ) -> None:
        self.api = api
        self.nodes = fleet.by_name()
        self.namespace = namespace
        self.state = state
        self.handed: set[str] = set()
        self.claims: dict[str, tuple[str, str, str]] = {}  # pod -> (node, claim name, claim uid)
        self.tasks: set[asyncio.Task[None]] = set()
        self.prepare_calls: list[int] = []
        self.retry_reasons: Counter[str] = Counter()
        self.daemons: DaemonKubelet | None = None
        if not fleet.host_managed:
            cliques = {node.name: rack_clique(i) for i, node in enumerate(fleet.nodes)}
            self.daemons = DaemonKubelet(
                api.client,
                stubs=lambda node: self.nodes[node].connect(),
                clique_of=cliques.__getitem__,
                clock=state.now,
                changed=state.changed,
                formation_s=formation_s,
            )

    def poll(self) -> None:
        if self.daemons is not None:
            self.daemons.poll()
            if self.daemons.errors:
                raise RuntimeError(f"daemon stand-in failed: {self.daemons.errors[0]}")
        for pod, node, claim in self.state.ready_to_prepare():
            if pod in self.handed:
                continue
            self.handed.add(pod)
            task = asyncio.create_task(
                self._prepare(pod, node, claim["metadata"]["name"], claim["metadata"]["uid"])
            )
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _prepare(self, pod: str, node: str, claim: str, uid: str) -> None:
        outcome = await kubelet_prepare(self.nodes[node].connect(), self.namespace, claim, uid)
        self.prepare_calls.append(outcome.calls)
        self.retry_reasons.update(reason.split(":")[0] for reason in outcome.retry_reasons)
        self.state.prepare_errors += outcome.calls - 1
        self.state.prepare_ms.append(outcome.last_call_ms)
        self.state.prepared[pod] = self.state.now()
        self.claims[pod] = (node, claim, uid)
        self.state.changed.set()
        status = {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
        with contextlib.suppress(Exception):
            await self.api.patch(f"/api/v1/namespaces/{self.namespace}/pods/{pod}/status", status)

    async def unprepare_all(self) -> None:
        await asyncio.gather(
            *(
                kubelet_unprepare(self.nodes[node].connect(), self.namespace, claim, uid)
                for node, claim, uid in self.claims.values()
            )
        )


def checkpoint_poller(fleet: Fleet, state: JobStart) -> Callable[[], None]:
    """With real kubelets: a pod counts as prepared once its node's checkpoint says so."""

    def poll() -> None:
        pods_by_claim_uid = {}
        for pod_name, pod in state.pods_seen.items():
            statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or []
            for status in statuses:
                claim = state.claims_seen.get(status.get("resourceClaimName") or "")
                if claim is not None:
                    pods_by_claim_uid[claim["metadata"]["uid"]] = (pod_name, pod["spec"].get("nodeName"))
        nodes = fleet.by_name()
        for uid, (pod_name, node) in pods_by_claim_uid.items():
            if pod_name in state.prepared or node not in nodes:
                continue
            if uid in nodes[node].prepared_claims():
                state.prepared[pod_name] = state.now()

    return poll


def api_deltas(before: Samples, after: Samples) -> dict[str, Any]:
    """Requests the apiserver served between two scrapes: by code, 409s and 429s by resource, by verb."""
    by_code: Counter[str] = Counter()
    by_verb_resource: Counter[str] = Counter()
    refused: dict[str, Counter[str]] = {"409": Counter(), "429": Counter()}
    for key, value in after.items():
        delta = value - before.get(key, 0.0)
        if key[0] != "apiserver_request_total" or delta <= 0:
            continue
        labels = dict(key[1])
        code = labels.get("code", "")
        resource = labels.get("resource", "") or labels.get("group", "")
        if labels.get("subresource"):
            resource += f"/{labels['subresource']}"
        by_code[code] += delta
        if code in refused:
            refused[code][resource] += delta
        if labels.get("verb") not in ("WATCH", "CONNECT"):
            by_verb_resource[f"{labels.get('verb')} {resource}"] += delta
    driver_409 = sum(n for r, n in refused["409"].items() if r.split("/")[0] in DRIVER_RESOURCES)
    return {
        "409": int(by_code.get("409", 0)),
        "429": int(by_code.get("429", 0)),
        "409_on_driver_resources": int(driver_409),
        "409_by_resource": {r: int(n) for r, n in refused["409"].items()},
        "429_by_resource": {r: int(n) for r, n in refused["429"].items()},
        "by_code": {code: int(n) for code, n in sorted(by_code.items())},
        "by_verb_and_resource": {
            k: int(v) for k, v in sorted(by_verb_resource.items(), key=lambda kv: -kv[1])
        },
        "requests": int(sum(by_verb_resource.values())),
    }


def stuck(state: JobStart, simulator: Simulator | None, fleet: Fleet) -> str:
    """What a timed-out job start reached, for the error message."""
    found: dict[str, Any] = {"breakdown": state.breakdown()}
    found["prepared"] = len(state.prepared)
    found["lease_renew_max_gap_s"] = round(fleet.renew_max_gap_s, 1)
    if simulator is not None and simulator.daemons is not None:
        daemons = simulator.daemons
        found["daemon_stages"] = {stage: len(t) for stage, t in daemons.times.items()}
        found["daemon_pods_seen"] = len(daemons.pods)
        late = sorted(set(daemons.times["ready"]) - set(daemons.times["published_ready"]))
        found["ready_not_published"] = {
            node: [
                (c.get("type"), c.get("status"), c.get("reason"))
                for pod in daemons.pods.values()
                if pod["spec"].get("nodeName") == node
                for c in (pod.get("status") or {}).get("conditions") or []
                if c.get("type") == "Ready"
            ]
            for node in late[:10]
        }
    log = fleet.nodes[0].base / "plugin.log"
    tail = log.read_text(errors="replace").splitlines()[-5:] if log.exists() else []
    return json.dumps(found) + "\nnode-0's plugin log ends:\n" + "\n".join(line[:300] for line in tail)


def controller_writes(before: Samples, after: Samples) -> dict[str, Any]:
    """The controller's own count of its API writes during the job start, by resource and verb."""
    by: Counter[str] = Counter()
    conflicts = 0
    for (name, labels), value in after.items():
        delta = value - before.get((name, labels), 0.0)
        if name != "imexdra_controller_api_writes_total" or delta <= 0:
            continue
        fields = dict(labels)
        by[f"{fields.get('verb')} {fields.get('resource')}"] += int(delta)
        conflicts += int(delta) if fields.get("code") == "409" else 0
    return {"total": sum(by.values()), "409": conflicts, "by_verb_and_resource": dict(by.most_common())}


def daemon_breakdown(state: JobStart, daemons: DaemonKubelet) -> dict[str, Any]:
    """When the daemons reached each stage (first and last), and each per-node step's p50 and max."""
    times = daemons.times
    stages: dict[str, Any] = {}
    for stage in DAEMON_STAGES:
        values = list(times[stage].values())
        stages[stage] = {
            "first_s": round(min(values), 2) if values else None,
            "all_s": round(max(values), 2) if len(values) >= state.pods else None,
            "count": len(values),
        }
    worker_node = {
        pod["spec"]["nodeName"]: name for name, pod in state.pods_seen.items() if pod["spec"].get("nodeName")
    }
    per_node = {
        node: {
            "worker_bound": state.pod_bound.get(pod),
            **{stage: times[stage].get(node) for stage in DAEMON_STAGES},
            "worker_prepared": state.prepared.get(pod),
        }
        for node, pod in worker_node.items()
    }
    chain = ("worker_bound", *DAEMON_STAGES, "worker_prepared")
    steps: dict[str, Any] = {}
    for start, end in itertools.pairwise(chain):
        lags = [
            marks[end] - marks[start]
            for marks in per_node.values()
            if marks.get(start) is not None and marks.get(end) is not None
        ]
        if lags:
            steps[f"{start}->{end}"] = {
                "p50_s": round(percentile(lags, 0.5), 2),
                "max_s": round(max(lags), 2),
            }
    return {
        "stages": stages,
        "steps_per_node": steps,
        "daemon_claim_prepare_calls": daemons.prepare_calls,
        "daemon_retry_reasons": daemons.retry_reasons[:5],
    }


def component_cpu(cluster: LocalCluster) -> dict[str, float]:
    """CPU seconds so far of each control-plane process, and of all kubelets and all fakecris together."""
    readings: Counter[str] = Counter()
    # LocalCluster has no public list of its processes; the bench only reads it.
    for process in cluster._supervisor.processes:
        if process.alive():
            kind = process.name.rsplit("-", 1)[-1] + "s" if process.name.startswith("node-") else process.name
            readings[kind] += cpu_seconds(process.popen.pid)
    return dict(readings)


@dataclass
class Profiler:
    """py-spy recording a process (non-blocking sampling) into raw collapsed stacks."""

    pid: int
    output: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        py_spy = Path(sys.executable).parent / "py-spy"
        argv = [str(py_spy), "record", "--pid", str(self.pid), "--rate", "100", "--nonblocking"]
        argv += ["--format", "raw", "--output", str(self.output)]
        self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> dict[str, Any]:
        assert self.process is not None
        self.process.send_signal(signal.SIGINT)
        self.process.wait(timeout=60)
        return summarize_profile(self.output)


def summarize_profile(path: Path, top: int = 12) -> dict[str, Any]:
    """The hottest functions of a raw py-spy profile: by own samples and by samples below them."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    samples = 0
    if not path.exists():
        return {"samples": 0}
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        samples += count
        frames = [
            frame.split(" (")[0] + " (" + frame.split(" (")[-1].split("/")[-1] for frame in stack.split(";")
        ]
        own[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    return {
        "samples": samples,
        "own_top": [(frame, round(n / samples, 3)) for frame, n in own.most_common(top)],
        "inclusive_top": [
            (frame, round(n / samples, 3))
            for frame, n in inclusive.most_common(top * 4)
            if "imexdra" in frame or "lightkube" in frame or "grpc" in frame
        ][:top],
    }


async def job_start(
    cluster: LocalCluster,
    api: Api,
    fleet: Fleet,
    controller: ControllerProcess,
    pods: int,
    namespace: str,
    profile: bool,
    formation_s: float = 0.0,
) -> dict[str, Any]:
    """One submit → all prepared, with its API traffic, CPU and memory; cleans up afterwards."""
    await api.post(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    )
    state = JobStart(pods)
    simulator = None if fleet.kubelets else Simulator(api, fleet, namespace, state, formation_s=formation_s)
    ns = f"/namespaces/{namespace}"
    sources: list[tuple[str, Callable[[str, dict[str, Any]], None]]] = [
        (f"/apis/resource.nvidia.com/v1beta1{ns}/computedomains", state.on_domain),
        (f"/api/v1{ns}/pods", state.on_pod),
        (f"/apis/resource.k8s.io/v1{ns}/resourceclaims", state.on_claim),
    ]
    daemons = simulator.daemons if simulator is not None else None
    if daemons is not None:
        driver_ns = f"/namespaces/{DRIVER_NAMESPACE}"
        sources += [
            (f"/api/v1{driver_ns}/pods", daemons.on_pod),
            (f"/apis/resource.k8s.io/v1{driver_ns}/resourceclaims", daemons.on_claim),
            (f"/apis/resource.nvidia.com/v1beta1{driver_ns}/computedomaincliques", daemons.on_clique),
        ]
    synced = [asyncio.Event() for _ in sources]
    watches = [
        asyncio.create_task(api.watch(path, handler, event))
        for (path, handler), event in zip(sources, synced, strict=True)
    ]
    await asyncio.gather(*(event.wait() for event in synced))
    poll = simulator.poll if simulator is not None else checkpoint_poller(fleet, state)
    mode = "host" if fleet.host_managed else "driver"
    profilers: list[tuple[str, Profiler]] = []
    if profile and controller.process is not None:
        assert cluster.run_dir is not None
        profilers = [
            (
                "controller",
                Profiler(controller.process.pid, cluster.run_dir / f"profile-controller-{mode}-{pods}.txt"),
            ),
            (
                "plugin_node_0",
                Profiler(fleet.nodes[0].process.pid, cluster.run_dir / f"profile-plugin-{mode}-{pods}.txt"),
            ),
        ]
        for _, profiler in profilers:
            profiler.start()
        await asyncio.sleep(1)
    before = apiserver_metrics(cluster)
    writes_before = controller.metrics() if controller.ours else {}
    cpu_before = {
        **component_cpu(cluster),
        "controller": controller.cpu_seconds(),
        "plugins": fleet.cpu_seconds(),
    }
    name = "train"
    restarts_before = api.watch_restarts
    state.t0 = time.monotonic()
    await asyncio.gather(
        api.post(f"/apis/resource.nvidia.com/v1beta1{ns}/computedomains", compute_domain(name)),
        api.post(f"/apis/batch/v1{ns}/jobs", job(name, pods)),
    )
    deadline = time.monotonic() + 120 + pods
    try:
        while len(state.prepared) < pods or not state.domain_is_ready:
            state.changed.clear()
            poll()
            if time.monotonic() > deadline:
                raise TimeoutError(f"job start of {pods} pods timed out: {stuck(state, simulator, fleet)}")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(state.changed.wait(), timeout=0.05)
        total_s = state.now()
        breakdown = state.breakdown()
        if fleet.kubelets:  # pods Running too (the kubelet starts them after the prepare)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(60):
                    while len(state.pod_running) < pods:
                        state.changed.clear()
                        await state.changed.wait()
            breakdown["all_pods_running_s"] = round(max(state.pod_running.values(), default=0.0), 2)
    finally:
        profiles = {label: profiler.stop() for label, profiler in profilers}
    after = apiserver_metrics(cluster)
    writes_after = controller.metrics() if controller.ours else {}
    cpu_after = {
        **component_cpu(cluster),
        "controller": controller.cpu_seconds(),
        "plugins": fleet.cpu_seconds(),
    }
    result = {
        "nodes": pods,
        "pods": pods,
        "submit_to_all_prepared_s": round(total_s, 2),
        "breakdown_s": breakdown,
        "prepare_ms": {
            "p50": round(percentile(state.prepare_ms, 0.5), 1),
            "p99": round(percentile(state.prepare_ms, 0.99), 1),
        }
        if state.prepare_ms
        else None,
        "prepare_errors_retried": state.prepare_errors,
        "kubelet_prepare_calls_per_claim": dict(sorted(Counter(simulator.prepare_calls).items()))
        if simulator is not None
        else None,
        "kubelet_retry_reasons": dict(simulator.retry_reasons) if simulator is not None else None,
        "prepared_curve_s": sorted(round(t, 3) for t in state.prepared.values()),
        "api": api_deltas(before, after),
        "controller_writes": controller_writes(writes_before, writes_after) if controller.ours else None,
        "cpu_s": {k: round(cpu_after[k] - cpu_before.get(k, 0.0), 2) for k in cpu_after},
        "bench_watch_restarts": api.watch_restarts - restarts_before,
        "lease_renew_max_gap_s": round(fleet.renew_max_gap_s, 1),
        "controller_rss_mib": controller.rss_mib(),
        "plugin_rss": fleet.rss(),
        "load_average": os.getloadavg(),
    }
    if daemons is not None:
        result["daemons"] = daemon_breakdown(state, daemons)
    if profiles:
        result["profiles"] = profiles
    await teardown(api, simulator, namespace, name)
    for watch in watches:
        watch.cancel()
    await asyncio.gather(*watches, return_exceptions=True)
    return result


async def teardown(api: Api, simulator: Simulator | None, namespace: str, name: str) -> None:
    """Delete the job and the domain; without kubelets, unprepare and delete the pods as one would."""
    ns = f"/namespaces/{namespace}"
    if simulator is not None:
        await simulator.unprepare_all()
        if simulator.daemons is not None:
            await simulator.daemons.unprepare_all()
    await api.delete(f"/apis/batch/v1{ns}/jobs/{name}", propagationPolicy="Background")
    if simulator is not None:
        await api.delete(f"/api/v1{ns}/pods", gracePeriodSeconds="0")
    deadline = time.monotonic() + 180
    while (await api.get(f"/apis/resource.k8s.io/v1{ns}/resourceclaims"))["items"]:
        if time.monotonic() > deadline:
            raise TimeoutError(f"claims of {namespace} not gone")
        if simulator is not None:
            await api.delete(f"/api/v1{ns}/pods", gracePeriodSeconds="0")
        await asyncio.sleep(0.5)
    await api.delete(f"/apis/resource.nvidia.com/v1beta1{ns}/computedomains/{name}")
    if simulator is not None and simulator.daemons is not None:
        # The DaemonSet goes with the domain; its pods terminate and a kubelet would confirm them.
        driver_ns = f"/namespaces/{DRIVER_NAMESPACE}"
        leftovers = (
            f"/apis/apps/v1{driver_ns}/daemonsets",
            f"/api/v1{driver_ns}/pods",
            f"/apis/resource.k8s.io/v1{driver_ns}/resourceclaims",
            f"/apis/resource.nvidia.com/v1beta1{driver_ns}/computedomaincliques",
        )
        while any([(await api.get(path))["items"] for path in leftovers]):
            if time.monotonic() > deadline:
                raise TimeoutError(f"daemon objects of {namespace} not gone")
            await api.delete(f"/api/v1{driver_ns}/pods", gracePeriodSeconds="0")
            await asyncio.sleep(0.5)
    await api.delete(f"/api/v1/namespaces/{namespace}")
    # The namespace controller's work would otherwise spill into the next run's figures.
    while (await api.http.get(f"/api/v1/namespaces/{namespace}")).status_code != 404:
        if time.monotonic() > deadline:
            raise TimeoutError(f"namespace {namespace} not gone")
        await asyncio.sleep(0.5)


# -- series ---------------------------------------------------------------------------------------


def memory_fits(count: int) -> bool:
    available_kib = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemAvailable:")
    )
    return count * PLUGIN_MIB * 1024 < available_kib - 2 * 1024 * 1024


async def series(
    cluster: LocalCluster,
    sizes: list[int],
    args: argparse.Namespace,
    *,
    kubelets: bool,
    host_managed: bool = True,
) -> list[dict[str, Any]]:
    """Job starts for each size on one cluster, growing the fleet; per size ours, then the other."""
    assert cluster.run_dir is not None
    install_api(cluster)
    api = Api(cluster)
    runs = []
    commands = [("ours", OUR_CONTROLLER_COMMAND)]
    if args.controller_command:
        commands.append(("other", args.controller_command))
    with tempfile.TemporaryDirectory(prefix="jsb-", dir=args.state_dir) as tmp:
        fleet = Fleet(cluster, Path(tmp), kubelets=kubelets, host_managed=host_managed)
        name = series_name(kubelets=kubelets, host_managed=host_managed)
        try:
            for size in sizes:
                if not memory_fits(size - len(fleet.nodes)):
                    runs.append(
                        {"nodes": size, "skipped": "the plugins would not fit in the available memory"}
                    )
                    continue
                grow_s = await fleet.grow(api, size)
                per_size: dict[str, Any] = {"nodes": size, "series": name}
                per_size["fleet_growth_s"] = round(grow_s, 1)
                for label, command in commands:
                    controller = ControllerProcess(
                        cluster.kubeconfig,
                        cluster.run_dir / f"controller-{label}.log",
                        host_managed=host_managed,
                        qps=args.controller_qps,
                        burst=args.controller_burst,
                        command=command,
                    )
                    controller.start()
                    try:
                        await controller.wait_ready()
                        await asyncio.sleep(1)  # caches synced; the apiserver quiet again
                        profile = label == "ours" and size in args.profile_nodes and not kubelets
                        namespace = f"job-{name[0]}{'d' if not host_managed else ''}{size}-{label}"
                        per_size[label] = await job_start(
                            cluster,
                            api,
                            fleet,
                            controller,
                            size,
                            namespace,
                            profile,
                            args.imex_formation_seconds,
                        )
                    except TimeoutError as error:
                        # The namespace is left as it is: this series ends here, the next mode goes on.
                        per_size["failed"] = {"controller": label, "error": str(error)[:2000]}
                        break
                    finally:
                        controller.stop()
                if "failed" in per_size:
                    runs.append(per_size)
                    print(json.dumps(per_size), file=sys.stderr, flush=True)
                    break
                if "other" in per_size:
                    per_size["ratios_ours_over_other"] = ratios(per_size["ours"], per_size["other"])
                runs.append(per_size)
                print(json.dumps(short(per_size)), file=sys.stderr, flush=True)
        finally:
            await fleet.close()
            await api.close()
    return runs


def series_name(*, kubelets: bool, host_managed: bool) -> str:
    """``kubelets`` and ``simulated`` are host-managed (their names predate the driver-managed series)."""
    if kubelets:
        return "kubelets"
    return "simulated" if host_managed else "simulated_driver_managed"


SERIES = ("kubelets", "simulated", "simulated_driver_managed")


def ratios(ours: dict[str, Any], other: dict[str, Any]) -> dict[str, float | None]:
    pairs = {
        "submit_to_all_prepared": (ours["submit_to_all_prepared_s"], other["submit_to_all_prepared_s"]),
        "domain_ready": (ours["breakdown_s"]["domain_ready_s"], other["breakdown_s"]["domain_ready_s"]),
        "api_requests": (ours["api"]["requests"], other["api"]["requests"]),
        "controller_cpu_s": (ours["cpu_s"]["controller"], other["cpu_s"]["controller"]),
        "controller_peak_rss": (ours["controller_rss_mib"]["VmHWM"], other["controller_rss_mib"]["VmHWM"]),
    }
    return {k: round(a / b, 3) if a is not None and b else None for k, (a, b) in pairs.items()}


def short(run: dict[str, Any]) -> dict[str, Any]:
    """A run without its curves and long request tables (the JSON file keeps them)."""
    copy = json.loads(json.dumps(run))
    for label in ("ours", "other"):
        if label in copy:
            copy[label].pop("prepared_curve_s", None)
            copy[label]["api"].pop("by_verb_and_resource", None)
    return copy


def verdict(results: dict[str, Any]) -> dict[str, Any]:
    found = {}
    for series_key in SERIES:
        for run in results.get(series_key, []):
            ours = run.get("ours")
            if ours is None or run["nodes"] not in TARGETS_S:
                continue
            target = TARGETS_S[run["nodes"]]
            entry = {
                "submit_to_all_prepared_s": ours["submit_to_all_prepared_s"],
                "target_s": target,
                "time_met": ours["submit_to_all_prepared_s"] <= target,
                "409": ours["api"]["409"],
                "429": ours["api"]["429"],
            }
            if run["nodes"] == max(TARGETS_S):
                entry["no_409_no_429_met"] = ours["api"]["409"] == 0 and ours["api"]["429"] == 0
            found[f"{series_key}_{run['nodes']}"] = entry
    return found


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {
        "benchmark": "jobstart_bench",
        "cpus": os.cpu_count(),
        "load_average_at_start": os.getloadavg(),
        "controller_rate_limit": {"qps": args.controller_qps, "burst": args.controller_burst},
        "plugin_rate_limit": {"qps": 5, "burst": 10},
        "targets_s": {str(k): v for k, v in TARGETS_S.items()},
        "controller_command": args.controller_command,
    }
    results["mode"] = args.mode
    results["imex_formation_seconds"] = args.imex_formation_seconds
    host_managed = args.mode in ("both", "host-managed")
    kubelet_sizes = [n for n in args.nodes if n <= args.max_kubelets] if host_managed else []
    if kubelet_sizes:
        with LocalCluster(nodes_specs=[], keep_run_dir=args.keep) as cluster:
            results["kubelets"] = await series(cluster, kubelet_sizes, args, kubelets=True)
    if host_managed:
        with LocalCluster(nodes_specs=[], keep_run_dir=args.keep) as cluster:
            results["simulated"] = await series(cluster, args.nodes, args, kubelets=False)
    if args.mode in ("both", "driver-managed"):
        with LocalCluster(nodes_specs=[], keep_run_dir=args.keep) as cluster:
            results["simulated_driver_managed"] = await series(
                cluster, args.nodes, args, kubelets=False, host_managed=False
            )
    results["load_average_at_end"] = os.getloadavg()
    results["verdict"] = verdict(results)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--nodes",
        type=lambda text: sorted({int(n) for n in text.split(",")}),
        default=list(DEFAULT_NODES),
        help="job sizes (one pod per node), comma-separated",
    )
    parser.add_argument("--quick", action="store_true", help="4 and 18 nodes, no kubelet series")
    parser.add_argument(
        "--mode",
        choices=("both", "host-managed", "driver-managed"),
        default="both",
        help="IMEX mode of the simulated series (real kubelets: host-managed only)",
    )
    parser.add_argument(
        "--imex-formation-seconds",
        type=float,
        default=0.0,
        help="driver-managed: time from a daemon knowing its index to IMEX answering READY (none runs here)",
    )
    parser.add_argument(
        "--max-kubelets", type=int, default=18, help="largest size also run on real kubelets (0: none)"
    )
    parser.add_argument(
        "--profile-nodes",
        type=lambda text: {int(n) for n in text.split(",") if n},
        default={18},
        help="simulated sizes during which py-spy records the controller and node-0's plugin ('' : none)",
    )
    parser.add_argument(
        "--controller-qps", type=float, default=5.0, help="controller --kube-api-qps (chart: 5)"
    )
    parser.add_argument(
        "--controller-burst", type=int, default=10, help="controller --kube-api-burst (chart: 10)"
    )
    parser.add_argument("--state-dir", default="/tmp", help="where the simulated nodes' directories live")
    parser.add_argument("--keep", action="store_true", help="keep the clusters' run directories (logs)")
    parser.add_argument("--controller-command", default=None, help=CONTROLLER_COMMAND_HELP)
    args = parser.parse_args()
    # SIGTERM (e.g. stopping a run in the background) tears down like Ctrl-C: plugins and cluster too.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if args.quick:
        args.nodes, args.max_kubelets = list(QUICK_NODES), 0
    results = asyncio.run(main_async(args))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "jobstart_bench.json").write_text(json.dumps(results, indent=1))
    write_jobstart_plot(results, RESULTS / "jobstart_bench.png", targets_s=TARGETS_S)
    printable = {**results}
    for series_key in SERIES:
        if series_key in printable:
            printable[series_key] = [short(run) for run in printable[series_key]]
    print(json.dumps(printable, indent=1))


if __name__ == "__main__":
    main()
