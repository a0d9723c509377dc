"""One plugin's turn in ``plugin_bench.py``: its cycles through the real kubelet and what is read of them.

- ``run_plugin``: start the plugin, wait until the kubelet has registered it and its ResourceSlice is
  listed, the first cycle, the idle window, the measured cycles; stop it, wait until the kubelet has
  dropped it, delete its slices; the turn's figures;
- ``Cycles.cycle``: one pod create → Running → delete → unprepared, pod and claim gone, with the
  kubelet's ``dra_grpc_operations_duration_seconds`` deltas and the plugin's own histogram and CPU;
- ``Kubelet``: the node's kubelet /metrics through the apiserver's node proxy.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import msgspec
from benchlib import DRIVER, Profiler
from benchlib import percentile as nearest_rank
from jobstart_api import exists
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
from imexdra_sim.localcluster.nodes import Node
from imexdra_sim.promtext import Samples, parse_metrics

T = TypeVar("T")

NODE = "bench-node"
NAMESPACE = "bench"
TEMPLATE = "bench-channel"
POD_IMAGE = "registry.k8s.io/pause:3.10"
KUBELET_HISTOGRAM = "dra_grpc_operations_duration_seconds"
OWN_HISTOGRAM = "nvidia_dra_request_duration_seconds"
PREPARE, UNPREPARE = "NodePrepareResources", "NodeUnprepareResources"
POLL_S = 0.02


async def until(what: str, check: Callable[[], Awaitable[T | None]], within: float = 120) -> T:
    """Poll ``check`` until it returns something truthy; its value."""
    deadline = time.monotonic() + within
    while not (found := await check()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {within:.0f} s waiting for {what}")
        await asyncio.sleep(POLL_S)
    return found


def pod(name: str) -> dict[str, Any]:
    """A pod on the node whose one container takes a channel claim made from the domain's template."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "nodeSelector": {"kubernetes.io/hostname": NODE},
            "resourceClaims": [{"name": "channel", "resourceClaimTemplateName": TEMPLATE}],
            "containers": [
                {"name": "main", "image": POD_IMAGE, "resources": {"claims": [{"name": "channel"}]}}
            ],
        },
    }


@dataclass
class Kubelet:
    """The node's kubelet as the bench reads it: its /metrics through the apiserver's node proxy."""

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
    """One plugin's turn: its cycles' figures."""

    plugin: Plugin
    kubelet: Kubelet
    transport: Transport
    node: Node
    cycles: list[dict[str, Any]] = field(default_factory=list)
    serial: int = 0

    async def cycle(self) -> dict[str, Any]:
        """Pod create → Running → delete → unprepared, pod and claim gone; this cycle's figures."""
        self.serial += 1
        name = f"{self.plugin.name}-{self.serial}"
        pods = f"/api/v1/namespaces/{NAMESPACE}/pods"
        before = await self.kubelet.samples()
        own_before = parse_metrics(await asyncio.to_thread(self.plugin.own_metrics))
        cpu_before = tree_on_cpu_seconds(self.plugin.pid)
        created = time.monotonic()
        await self.transport.request("POST", pods, body=pod(name))

        async def running() -> dict[str, Any] | None:
            found = msgspec.json.decode((await self.transport.request("GET", f"{pods}/{name}")).body)
            assert isinstance(found, dict)
            self.plugin.pid  # noqa: B018 (a plugin that exited fails the wait at once)
            return found if found["status"].get("phase") == "Running" else None

        found = await until(f"pod {name} Running", running)
        running_s = time.monotonic() - created
        claim = found["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
        pod_uid = found["metadata"]["uid"]
        cdi_devices = [
            device
            for record in self.node.cri_records("CreateContainer")
            if record.get("pod_uid") == pod_uid
            for device in record.get("cdi_devices") or []
        ]
        deleted = time.monotonic()
        await self.transport.request("DELETE", f"{pods}/{name}")
        prepared = self.kubelet.calls(before, UNPREPARE)[0]

        async def unprepared() -> Samples | None:
            samples = await self.kubelet.samples()
            return samples if self.kubelet.calls(samples, UNPREPARE)[0] > prepared else None

        after = await until(f"claim of {name} unprepared", unprepared)
        await until(f"pod {name} gone", lambda: self._gone(f"{pods}/{name}"))
        claims = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims"
        await until(f"claim {claim} gone", lambda: self._gone(f"{claims}/{claim}"))
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
        return figures

    async def _gone(self, path: str) -> bool:
        return not await exists(self.transport, path)


def own_seconds(samples: Samples, operation: str) -> float:
    """The plugin's own ``nvidia_dra_request_duration_seconds`` sum for ``operation`` (its handler's time)."""
    return sum(
        value
        for (name, labels), value in samples.items()
        if name == OWN_HISTOGRAM + "_sum" and dict(labels).get("operation") == operation
    )


def summary(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(nearest_rank(values, 0.5), 3),
        "p99": round(nearest_rank(values, 0.99), 3),
        "max": round(max(values), 3),
    }


async def run_plugin(
    plugin: Plugin, cluster: LocalCluster, files: NodeFiles, transport: Transport, args: argparse.Namespace
) -> dict[str, Any]:
    """One plugin's turn on the node: start, first cycle, idle window, cycles, stop, clean up."""
    kubelet = Kubelet(transport, NODE)
    files.reset()
    started = time.monotonic()
    plugin.start()
    try:
        await until(f"the kubelet registering the {plugin.name} plugin", kubelet.registered, within=120)
        registered_s = time.monotonic() - started
        slices = (
            f"/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName={NODE},spec.driver={DRIVER}"
        )
        await until("the plugin's ResourceSlice", lambda: _listed(transport, slices))
        cycles = Cycles(plugin, kubelet, transport, files.node)
        first = await cycles.cycle()
        rss_after_first = tree_rss_mib(plugin.pid)
        ticks_before, on_cpu_before = tree_cpu_seconds(plugin.pid), tree_on_cpu_seconds(plugin.pid)
        threads_before = on_cpu_by_thread(plugin.pid)
        window = time.monotonic()
        await asyncio.sleep(args.idle_seconds)  # the measurement interval itself: no work on the node
        window = time.monotonic() - window
        idle_cpu_ms_per_s = (tree_on_cpu_seconds(plugin.pid) - on_cpu_before) * 1e3 / window
        idle_ticks_ms_per_s = (tree_cpu_seconds(plugin.pid) - ticks_before) * 1e3 / window
        idle_by_thread = {
            thread: round((seconds - threads_before.get(thread, 0.0)) * 1e3 / window, 3)
            for thread, seconds in on_cpu_by_thread(plugin.pid).items()
        }
        profiler = None
        if args.profile and plugin.name == "imexdra":
            assert plugin.process is not None
            profiler = Profiler(plugin.pid, files.node.host_dir / "imexdra-cycles.pyspy")
            profiler.start()
        rss_idle = tree_rss_mib(plugin.pid)
        cycles_cpu_before = tree_cpu_seconds(plugin.pid)
        runs = []
        for index in range(args.cycles):
            runs.append(await cycles.cycle())
            if (index + 1) % 10 == 0:
                print(
                    f"[plugin-bench] {plugin.name}: {index + 1}/{args.cycles} cycles",
                    flush=True,
                    file=sys.stderr,
                )
        cycles_cpu_ms = (tree_cpu_seconds(plugin.pid) - cycles_cpu_before) * 1e3
        profile = profiler.stop() if profiler is not None else None
        rss_after = tree_rss_mib(plugin.pid)
        threads = thread_count(plugin.pid)
        processes = len(process_tree(plugin.pid))
    finally:
        exit_code = plugin.stop()
    await until("the kubelet dropping the plugin", lambda: _not(kubelet.registered), within=120)
    cluster.kubectl("delete", "resourceslices", f"--field-selector=spec.nodeName={NODE},spec.driver={DRIVER}")
    labels = msgspec.json.decode((await transport.request("GET", f"/api/v1/nodes/{NODE}")).body)["metadata"]
    return {
        "plugin": plugin.name,
        "start_to_registered_s": round(registered_s, 2),
        "first_cycle": first,
        "idle_window_s": args.idle_seconds,
        "idle_cpu_ms_per_s": round(idle_cpu_ms_per_s, 3),
        "idle_cpu_ms_per_s_from_ticks": round(idle_ticks_ms_per_s, 3),
        "idle_cpu_ms_per_s_by_thread": dict(sorted(idle_by_thread.items(), key=lambda item: -item[1])),
        "cpu_ms_per_cycle_mean_from_ticks": round(cycles_cpu_ms / max(1, args.cycles), 2),
        "rss_mib": {"after_first_cycle": rss_after_first, "idle": rss_idle, "after_cycles": rss_after},
        "threads": threads,
        "processes": processes,
        "exit_code": exit_code,
        "node_labels_after": {k: v for k, v in labels.get("labels", {}).items() if "computeDomain" in k},
        "prepare_ms": summary([c["prepare_ms"] for c in runs]),
        "unprepare_ms": summary([c["unprepare_ms"] for c in runs]),
        "prepare_own_ms": summary([c["prepare_own_ms"] for c in runs]),
        "unprepare_own_ms": summary([c["unprepare_own_ms"] for c in runs]),
        "pod_running_s": summary([c["pod_running_s"] for c in runs]),
        "cpu_ms_per_cycle": summary([c["cpu_ms"] for c in runs]),
        "calls_per_cycle_not_one": sum(
            1 for c in runs if c["prepare_calls"] != 1 or c["unprepare_calls"] != 1
        ),
        **({"cycles_profile": profile} if profile is not None else {}),
        "cycles": runs,
    }


async def _listed(transport: Transport, path: str) -> bool:
    return bool(msgspec.json.decode((await transport.request("GET", path)).body)["items"])


async def _not(check: Callable[[], Awaitable[bool]]) -> bool:
    return not await check()
