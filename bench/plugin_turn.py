"""One plugin's turn in ``plugin_bench.py``: its cycles through the real kubelets, what is read of them.

- ``run_turns``: one plugin's turn on every node of the run, phase by phase on all nodes at once
  (``asyncio.TaskGroup``: a node that fails stops the others): start a plugin process per node, wait
  until each node's kubelet has registered it and its ResourceSlice is listed; the first cycle; the idle
  window (the same window for every node, so no node's cycles run while another measures idle CPU);
  the measured cycles, sequential within a node, every node its own pod stream; stop, wait until each
  kubelet has dropped its plugin, delete its slices; each node's figures;
- ``Turn``: those phases for one node's plugin process, and its figures;
- ``Cycles.cycle``: one pod create → Running → delete → unprepared, pod and claim gone, with the
  node's kubelet's ``dra_grpc_operations_duration_seconds`` deltas and the plugin's own histogram and CPU;
- ``Kubelet``: one node's kubelet /metrics through the apiserver's node proxy.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import msgspec
from benchlib import DRIVER, Profiler
from jobstart_api import exists
from plugin_nodes import CYCLE_FIGURES, summary
from plugin_processes import (
    NodeFiles,
    Plugin,
    on_cpu_by_thread,
    process_tree,
    thread_count,
    tree_cpu_seconds,
    tree_on_cpu_seconds,
    tree_rss_mib,
)

from imexdra.common.kube.transport import Transport
from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.promtext import Samples, parse_metrics
from imexdra_sim.waiting import poll_async

NAMESPACE = "bench"
TEMPLATE = "bench-channel"
POD_IMAGE = "registry.k8s.io/pause:3.10"
KUBELET_HISTOGRAM = "dra_grpc_operations_duration_seconds"
OWN_HISTOGRAM = "nvidia_dra_request_duration_seconds"
PREPARE, UNPREPARE = "NodePrepareResources", "NodeUnprepareResources"
REQUESTS = "rest_client_requests_total"
RATE_LIMITED = "rest_client_rate_limiter_duration_seconds_sum"
#: How often one node's waits poll (the pod's phase, the kubelet's /metrics). With N nodes each polls
#: N times less often, so the bench's own requests (and the parsing of a kubelet's /metrics on its
#: one event loop) stay what one node's are, not N times that on the same cores as the cluster.
POLL_S = 0.02
#: How long one step of a cycle (a pod Running, a claim unprepared, a registration) may take.
WAIT_S = 120


def pod(name: str, node: str) -> dict[str, Any]:
    """A pod on ``node`` whose one container takes a channel claim made from the domain's template."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "nodeSelector": {"kubernetes.io/hostname": node},
            "resourceClaims": [{"name": "channel", "resourceClaimTemplateName": TEMPLATE}],
            "containers": [
                {"name": "main", "image": POD_IMAGE, "resources": {"claims": [{"name": "channel"}]}}
            ],
        },
    }


@dataclass
class Kubelet:
    """A node's kubelet as the bench reads it: its /metrics through the apiserver's node proxy."""

    transport: Transport
    node: str

    async def samples(self) -> Samples:
        response = await self.transport.request("GET", f"/api/v1/nodes/{self.node}/proxy/metrics")
        return parse_metrics(response.body.decode())

    @staticmethod
    def calls(samples: Samples, method: str) -> tuple[float, float]:
        """(count, sum in seconds) of the kubelet's calls of ``method`` to our driver name."""
        count = total = 0.0
        for (name, labels), value in samples.items():
            labelled = dict(labels)
            if labelled.get("driver_name") != DRIVER or method not in labelled.get("method_name", ""):
                continue
            if name == f"{KUBELET_HISTOGRAM}_count":
                count += value
            elif name == f"{KUBELET_HISTOGRAM}_sum":
                total += value
        return count, total

    async def registered(self) -> bool:
        """Whether the kubelet's plugin manager holds a plugin registered for the driver."""
        return any(
            name == "plugin_manager_total_plugins"
            and dict(labels).get("state") == "actual_state_of_world"
            and DRIVER in dict(labels).get("socket_path", "")
            and value > 0
            for (name, labels), value in (await self.samples()).items()
        )


@dataclass
class Cycles:
    """One plugin process's cycles on its node: each one's figures."""

    plugin: Plugin
    kubelet: Kubelet
    transport: Transport
    files: NodeFiles
    poll_s: float = POLL_S
    serial: int = 0

    async def cycle(self) -> dict[str, Any]:
        """Pod create → Running → delete → unprepared, pod and claim gone; this cycle's figures."""
        self.serial += 1
        node = self.files.node
        name = f"{self.plugin.name}-{node.name}-{self.serial}"
        pods = f"/api/v1/namespaces/{NAMESPACE}/pods"
        before = await self.kubelet.samples()
        own_before = parse_metrics(await asyncio.to_thread(self.plugin.own_metrics))
        cpu_before = tree_on_cpu_seconds(self.plugin.pid)
        created = time.monotonic()
        await self.transport.request("POST", pods, body=pod(name, node.name))

        async def running() -> dict[str, Any] | None:
            found = msgspec.json.decode((await self.transport.request("GET", f"{pods}/{name}")).body)
            assert isinstance(found, dict)
            self.plugin.pid  # noqa: B018 (a plugin that exited fails the wait at once)
            return found if found["status"].get("phase") == "Running" else None

        found = await poll_async(f"pod {name} Running", running, within=WAIT_S, interval=self.poll_s)
        running_s = time.monotonic() - created
        claim = found["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
        pod_uid = found["metadata"]["uid"]
        cdi_devices = [
            device
            for record in node.cri_records("CreateContainer")
            if record.get("pod_uid") == pod_uid
            for device in record.get("cdi_devices") or []
        ]
        deleted = time.monotonic()
        await self.transport.request("DELETE", f"{pods}/{name}")
        prepared = self.kubelet.calls(before, UNPREPARE)[0]

        async def unprepared() -> Samples | None:
            samples = await self.kubelet.samples()
            return samples if self.kubelet.calls(samples, UNPREPARE)[0] > prepared else None

        after = await poll_async(
            f"claim of {name} unprepared", unprepared, within=WAIT_S, interval=self.poll_s
        )
        await poll_async(
            f"pod {name} gone", lambda: self._gone(f"{pods}/{name}"), within=WAIT_S, interval=self.poll_s
        )
        claims = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims"
        await poll_async(
            f"claim {claim} gone",
            lambda: self._gone(f"{claims}/{claim}"),
            within=WAIT_S,
            interval=self.poll_s,
        )
        gone_s = time.monotonic() - deleted
        own_after = parse_metrics(await asyncio.to_thread(self.plugin.own_metrics))
        figures: dict[str, Any] = {
            "pod_running_s": round(running_s, 4),
            "delete_to_gone_s": round(gone_s, 4),
            "cdi_devices": cdi_devices,
            "cpu_ms": round((tree_on_cpu_seconds(self.plugin.pid) - cpu_before) * 1e3, 2),
        }
        for method, key in ((PREPARE, "prepare"), (UNPREPARE, "unprepare")):
            count_before, sum_before = self.kubelet.calls(before, method)
            count_after, sum_after = self.kubelet.calls(after, method)
            figures[f"{key}_calls"] = int(count_after - count_before)
            figures[f"{key}_ms"] = round((sum_after - sum_before) * 1e3, 3)
            own = own_seconds(own_after, key) - own_seconds(own_before, key)
            figures[f"{key}_own_ms"] = round(own * 1e3, 3)
        # The plugin's API client (client-go's rest_client_* metrics, which both plugins export): its
        # requests in the cycle and the time they waited in the client's QPS token bucket.
        figures["api_requests"] = int(metric_total(own_after, REQUESTS) - metric_total(own_before, REQUESTS))
        waited = metric_total(own_after, RATE_LIMITED) - metric_total(own_before, RATE_LIMITED)
        figures["rate_limiter_wait_ms"] = round(waited * 1e3, 3)
        return figures

    async def _gone(self, path: str) -> bool:
        return not await exists(self.transport, path)


def metric_total(samples: Samples, name: str) -> float:
    """The sum of every series of ``name`` (all label sets); 0 when the plugin does not export it."""
    return sum(value for (series, _labels), value in samples.items() if series == name)


def own_seconds(samples: Samples, operation: str) -> float:
    """The plugin's own ``nvidia_dra_request_duration_seconds`` sum for ``operation`` (its handler's time)."""
    return sum(
        value
        for (name, labels), value in samples.items()
        if name == OWN_HISTOGRAM + "_sum" and dict(labels).get("operation") == operation
    )


@dataclass
class Turn:
    """One plugin process's turn on one node, in the phases ``run_turns`` runs on every node at once."""

    plugin: Plugin
    files: NodeFiles
    transport: Transport
    cluster: LocalCluster
    poll_s: float = POLL_S
    #: py-spy records this process during its cycles (``--profile``: ours, on the first node only).
    profile: bool = False
    #: What the phases read, for ``finish`` to report.
    read: dict[str, Any] = field(default_factory=dict, init=False)
    #: (utime + stime, time on CPU, time on CPU by thread name) at the idle window's start.
    idle_from: tuple[float, float, dict[str, float]] = field(default=(0.0, 0.0, {}), init=False)
    exit_code: int | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.node = self.files.node.name
        self.kubelet = Kubelet(self.transport, self.node)
        self.cycles = Cycles(self.plugin, self.kubelet, self.transport, self.files, self.poll_s)

    async def start(self) -> None:
        """On an emptied node, start the plugin; until the kubelet has registered it and its slice is up."""
        self.files.reset()
        started = time.monotonic()
        self.plugin.start()
        await poll_async(
            f"the kubelet of {self.node} registering the {self.plugin.name} plugin",
            self.kubelet.registered,
            within=WAIT_S,
            interval=self.poll_s,
        )
        self.read["start_to_registered_s"] = round(time.monotonic() - started, 2)
        await poll_async(
            f"the plugin's ResourceSlice on {self.node}", self._sliced, within=WAIT_S, interval=self.poll_s
        )

    async def first_cycle(self) -> None:
        self.read["first_cycle"] = await self.cycles.cycle()
        self.read["rss_after_first"] = tree_rss_mib(self.plugin.pid)

    def idle_begin(self) -> None:
        pid = self.plugin.pid
        self.idle_from = (tree_cpu_seconds(pid), tree_on_cpu_seconds(pid), on_cpu_by_thread(pid))

    def idle_end(self, window: float) -> None:
        """The idle figures over ``window`` seconds since ``idle_begin``."""
        pid = self.plugin.pid
        ticks_before, on_cpu_before, threads_before = self.idle_from
        self.read["idle_cpu_ms_per_s"] = round((tree_on_cpu_seconds(pid) - on_cpu_before) * 1e3 / window, 3)
        self.read["idle_ticks"] = round((tree_cpu_seconds(pid) - ticks_before) * 1e3 / window, 3)
        by_thread = {
            thread: round((seconds - threads_before.get(thread, 0.0)) * 1e3 / window, 3)
            for thread, seconds in on_cpu_by_thread(pid).items()
        }
        self.read["idle_by_thread"] = dict(sorted(by_thread.items(), key=lambda item: -item[1]))
        self.read["rss_idle"] = tree_rss_mib(pid)

    async def run_cycles(self, count: int) -> None:
        """``count`` cycles, one after the other."""
        profiler = None
        if self.profile:
            profiler = Profiler(self.plugin.pid, self.files.node.host_dir / "imexdra-cycles.pyspy")
            profiler.start()
        cpu_before = tree_cpu_seconds(self.plugin.pid)
        runs = []
        for index in range(count):
            runs.append(await self.cycles.cycle())
            if (index + 1) % 10 == 0:
                print(
                    f"[plugin-bench] {self.plugin.name} on {self.node}: {index + 1}/{count} cycles",
                    flush=True,
                    file=sys.stderr,
                )
        self.read["cycles_cpu_ms"] = (tree_cpu_seconds(self.plugin.pid) - cpu_before) * 1e3
        if profiler is not None:
            self.read["cycles_profile"] = profiler.stop()
        self.read["rss_after"] = tree_rss_mib(self.plugin.pid)
        self.read["threads"] = thread_count(self.plugin.pid)
        self.read["processes"] = len(process_tree(self.plugin.pid))
        self.read["cycles"] = runs

    def stop_plugin(self) -> None:
        """SIGTERM (SIGKILL after 60 s); no-op once stopped."""
        if self.plugin.process is not None:
            self.exit_code = self.plugin.stop()

    async def finish(self, idle_seconds: float, count: int) -> dict[str, Any]:
        """Once stopped: until the kubelet has dropped the plugin; delete its slices; the turn's figures."""
        await poll_async(
            "the kubelet dropping the plugin", self._dropped, within=WAIT_S, interval=self.poll_s
        )
        selector = f"--field-selector=spec.nodeName={self.node},spec.driver={DRIVER}"
        await asyncio.to_thread(self.cluster.kubectl, "delete", "resourceslices", selector)
        found = await self.transport.request("GET", f"/api/v1/nodes/{self.node}")
        labels = msgspec.json.decode(found.body)["metadata"].get("labels", {})
        read, runs = self.read, self.read["cycles"]
        return {
            "plugin": self.plugin.name,
            "start_to_registered_s": read["start_to_registered_s"],
            "first_cycle": read["first_cycle"],
            "idle_window_s": idle_seconds,
            "idle_cpu_ms_per_s": read["idle_cpu_ms_per_s"],
            "idle_cpu_ms_per_s_from_ticks": read["idle_ticks"],
            "idle_cpu_ms_per_s_by_thread": read["idle_by_thread"],
            "cpu_ms_per_cycle_mean_from_ticks": round(read["cycles_cpu_ms"] / max(1, count), 2),
            "rss_mib": {
                "after_first_cycle": read["rss_after_first"],
                "idle": read["rss_idle"],
                "after_cycles": read["rss_after"],
            },
            "threads": read["threads"],
            "processes": read["processes"],
            "exit_code": self.exit_code,
            "node_labels_after": {k: v for k, v in labels.items() if "computeDomain" in k},
            **{figure: summary([c[key] for c in runs]) for figure, key in CYCLE_FIGURES.items()},
            "calls_per_cycle_not_one": sum(
                1 for c in runs if c["prepare_calls"] != 1 or c["unprepare_calls"] != 1
            ),
            **({"cycles_profile": read["cycles_profile"]} if "cycles_profile" in read else {}),
            "cycles": runs,
        }

    async def _sliced(self) -> bool:
        selector = f"spec.nodeName={self.node},spec.driver={DRIVER}"
        path = f"/apis/resource.k8s.io/v1/resourceslices?fieldSelector={selector}"
        return bool(msgspec.json.decode((await self.transport.request("GET", path)).body)["items"])

    async def _dropped(self) -> bool:
        return not await self.kubelet.registered()


async def run_turns(turns: list[Turn], idle_seconds: float, count: int) -> list[dict[str, Any]]:
    """One plugin's turn on every node (``turns``: one per node), phase by phase; each node's figures."""
    try:
        await _on_every_node(turns, Turn.start)
        await _on_every_node(turns, Turn.first_cycle)
        for turn in turns:
            turn.idle_begin()
        window = time.monotonic()
        await asyncio.sleep(idle_seconds)  # the measurement interval itself: no work on any node
        window = time.monotonic() - window
        for turn in turns:
            turn.idle_end(window)
        await _on_every_node(turns, lambda turn: turn.run_cycles(count))
    finally:
        # Every node's plugin at once: each stop waits for its process to exit.
        await asyncio.gather(*(asyncio.to_thread(turn.stop_plugin) for turn in turns))
    return list(await asyncio.gather(*(turn.finish(idle_seconds, count) for turn in turns)))


async def _on_every_node(turns: list[Turn], phase: Callable[[Turn], Coroutine[Any, Any, None]]) -> None:
    """``phase`` of every turn at once; the first failure cancels the others (and is raised)."""
    async with asyncio.TaskGroup() as group:
        for turn in turns:
            group.create_task(phase(turn))
