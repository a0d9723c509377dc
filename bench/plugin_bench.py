"""The kubelet plugin through the real kubelet, ours and upstream's in one run (a benchmark, not a test).

Issue 43 item 2. One local cluster (real etcd, apiserver, scheduler, controller-manager) with one
fakecri node running a real kubelet (1.36.x). Both plugins register the driver name
``compute-domain.nvidia.com``, so they take turns on that node: the first runs its cycles and is
stopped (SIGTERM), its ResourceSlices are deleted, the kubelet is seen to drop its registration, the
node's plugin directory and CDI root are emptied; then the second runs the same cycles. Same node,
same kubelet, same mock ``libnvidia-ml.so.1`` (driver root written once), same claims.

Both run as host processes on the node, as the integration tier runs ours: ours is the
``compute-domain-kubelet-plugin`` of ``runtimevenv`` (what the image installs), upstream's is its
binary built from a checkout by ``bench/upstream.sh run-plugin`` (docs/upstream-plugin.md has its
flags and what it needs of a node). Both get the admin kubeconfig and their default client rate limit
(5 QPS, burst 10), driver-managed IMEX mode.

The daemon side: driver-managed, a channel prepare waits until the node's IMEX daemon is Ready in
the domain. No daemon runs here: before the cycles the bench writes what the controller writes once
the node's daemon is Ready, the ComputeDomainClique ``<domain UID>.<clique>`` with the node's daemon
``Ready`` (which ours reads, and upstream reads first under its default ComputeDomainCliques gate)
and the domain's ``status.nodes`` with the node ``Ready`` (upstream's fallback). Every cycle uses
that one domain, so a prepare finds the daemon Ready: what is measured is the steady state of a
node whose daemon is up, not the daemon's start. The bench also stands in for the controller's
workload ResourceClaimTemplate (``imexdra_sim.builders.channel_template``).

A cycle: create a pod referencing the template (nodeSelector: the node) → the resourceclaim
controller makes its claim, the scheduler allocates channel 0 → the kubelet's NodePrepareResources →
pod Running → delete the pod → the kubelet's NodeUnprepareResources, the pod and its claim gone.
Cycles are sequential (channel 0 holds one prepared claim per node). The first cycle of each plugin
is reported apart (``first_cycle``), then a quiet window (``--idle-seconds``, default 30) with no
work measures idle CPU, then ``--cycles`` cycles.

Measured per cycle: the kubelet's own ``dra_grpc_operations_duration_seconds`` (its /metrics through
the apiserver's node proxy, deltas of the histogram's sum and count per method, so a cycle with one
call each gives that call's time exactly), beside the plugin's own ``nvidia_dra_request_duration_seconds``
(its handler's time, without the gRPC and the claim GET around it); pod create → Running seen by the
bench (polling the pod); the CDI devices fakecri's CreateContainer got; the plugin's time on CPU
(``schedstat`` of every thread, ns, summed over its process tree) from cycle start to cycle end. Per
plugin: RSS (VmRSS, VmHWM; summed over the process tree) after the idle window and after the cycles;
idle CPU per second, in all and by thread name; ``utime + stime`` over all cycles as a check (it also
counts threads that ended).

``--step-timing`` runs ours through ``steptiming.py`` (its prepares' steps timed from inside);
``--profile`` records ours with py-spy during its cycles. Both change what they measure a little:
the committed side-by-side runs without them.

Run: ``flock /tmp/imexdra-heavy.lock .venv/bin/python bench/plugin_bench.py [--cycles 50]
[--upstream-checkout /tmp/upstream-src] [--order imexdra,upstream]`` after ``make bench``.
Output: JSON on stdout and in ``bench/results/plugin_bench.json`` (``--output`` names another),
plot beside it (``.png``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import steptiming
from benchlib import (
    CLIQUE,
    DRIVER,
    DRIVER_NAMESPACE,
    RESULTS,
    Profiler,
    install_crds,
    kubectl_apply,
)
from benchlib import percentile as nearest_rank
from jobstart_api import exists
from plotting import write_plugin_plot
from plugin_processes import (
    NodeFiles,
    Plugin,
    on_cpu_by_thread,
    our_plugin,
    process_tree,
    thread_count,
    tree_cpu_seconds,
    tree_on_cpu_seconds,
    tree_rss_mib,
    upstream_plugin,
)
from upstream_build import binary_commit, upstream_binary

from imexdra.common.kube.connection import connect
from imexdra.common.kube.transport import Transport
from imexdra_sim.builders import channel_template, compute_domain
from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.localcluster.nodes import GPU_NODE_LABELS, Node, NodeSpec
from imexdra_sim.promtext import Samples, parse_metrics

T = TypeVar("T")

NODE = "bench-node"
NAMESPACE = "bench"
DOMAIN = "bench"
TEMPLATE = "bench-channel"
POD_IMAGE = "registry.k8s.io/pause:3.10"
DEFAULT_CHECKOUT = Path("/tmp/upstream-src")
KUBELET_HISTOGRAM = "dra_grpc_operations_duration_seconds"
OWN_HISTOGRAM = "nvidia_dra_request_duration_seconds"
PREPARE, UNPREPARE = "NodePrepareResources", "NodeUnprepareResources"
#: Upstream's exact CEL selectors of its two DeviceClasses (its chart's; ours are the same).
DEVICE_CLASSES = {
    "compute-domain-default-channel.nvidia.com": (
        f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'channel' && "
        f"device.attributes['{DRIVER}'].id == 0"
    ),
    "compute-domain-daemon.nvidia.com": (
        f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == 'daemon'"
    ),
}
POLL_S = 0.02


async def until(what: str, check: Callable[[], Awaitable[T | None]], within: float = 120) -> T:
    """Poll ``check`` until it returns something truthy; its value."""
    deadline = time.monotonic() + within
    while not (found := await check()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {within:.0f} s waiting for {what}")
        await asyncio.sleep(POLL_S)
    return found


def install_api(cluster: LocalCluster) -> str:
    """CRDs, DeviceClasses, namespaces, the domain with its template and its daemon side; the domain UID."""
    install_crds(cluster)
    kubectl_apply(
        cluster,
        *(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": name},
                "spec": {"selectors": [{"cel": {"expression": selector}}]},
            }
            for name, selector in DEVICE_CLASSES.items()
        ),
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": DRIVER_NAMESPACE}},
        compute_domain(DOMAIN, NAMESPACE, num_nodes=1),
    )
    uid = cluster.kubectl(
        "get", "computedomain", DOMAIN, "-n", NAMESPACE, "-o", "jsonpath={.metadata.uid}"
    ).stdout
    daemon = {"ipAddress": "127.100.1.200", "cliqueID": CLIQUE, "index": 0, "status": "Ready"}
    kubectl_apply(
        cluster,
        channel_template(NAMESPACE, TEMPLATE, uid),
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomainClique",
            "metadata": {
                "name": f"{uid}.{CLIQUE}",
                "namespace": DRIVER_NAMESPACE,
                "labels": {
                    "resource.nvidia.com/computeDomain": uid,
                    "resource.nvidia.com/computeDomain.cliqueID": CLIQUE,
                },
            },
            "daemons": [{"nodeName": NODE, **daemon}],
        },
    )
    status = {"status": {"status": "Ready", "nodes": [{"name": NODE, **daemon}]}}
    cluster.kubectl(
        "patch", "computedomain", DOMAIN, "-n", NAMESPACE, "--subresource=status", "--type=merge",
        "-p", json.dumps(status),
    )  # fmt: skip
    return uid


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


def ratios(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, float]:
    """Our figures over upstream's for the headline figures."""

    def ratio(a: float, b: float) -> float:
        return round(a / b, 2) if b else float("nan")

    return {
        "prepare_p50": ratio(ours["prepare_ms"]["p50"], theirs["prepare_ms"]["p50"]),
        "prepare_p99": ratio(ours["prepare_ms"]["p99"], theirs["prepare_ms"]["p99"]),
        "unprepare_p50": ratio(ours["unprepare_ms"]["p50"], theirs["unprepare_ms"]["p50"]),
        "pod_running_p50": ratio(ours["pod_running_s"]["p50"], theirs["pod_running_s"]["p50"]),
        "rss_idle": ratio(ours["rss_mib"]["idle"]["VmRSS"], theirs["rss_mib"]["idle"]["VmRSS"]),
        "rss_peak": ratio(
            ours["rss_mib"]["after_cycles"]["VmHWM"], theirs["rss_mib"]["after_cycles"]["VmHWM"]
        ),
        "idle_cpu": ratio(ours["idle_cpu_ms_per_s"], theirs["idle_cpu_ms_per_s"]),
        "cpu_per_cycle_p50": ratio(ours["cpu_ms_per_cycle"]["p50"], theirs["cpu_ms_per_cycle"]["p50"]),
    }


async def bench(cluster: LocalCluster, args: argparse.Namespace) -> dict[str, Any]:
    order = args.order.split(",")
    # The commit of the binary run-plugin runs (built first if missing), read before any turn: fails fast.
    commit = binary_commit(upstream_binary("plugin", args.upstream_checkout)) if "upstream" in order else None
    install_api(cluster)
    files = NodeFiles.write(cluster.node(NODE))
    assert cluster.run_dir is not None
    step_record = cluster.run_dir / "imexdra-steps.txt"
    makers = {
        "imexdra": lambda: our_plugin(
            files,
            cluster.kubeconfig,
            cluster.run_dir / "imexdra-plugin.log",
            step_record if args.step_timing else None,
        ),
        "upstream": lambda: upstream_plugin(
            files, cluster.kubeconfig, args.upstream_checkout, cluster.run_dir / "upstream-plugin.log"
        ),
    }
    transport = connect(cluster.kubeconfig).transport(user_agent="plugin-bench")
    runs = {}
    for name in args.order.split(","):
        runs[name] = await run_plugin(makers[name](), cluster, files, transport, args)
        if name == "imexdra" and args.step_timing:
            runs[name]["plugin_steps_p50_ms"] = steptiming.steps(step_record)
        print(f"[plugin-bench] {name}: {json.dumps({k: v for k, v in runs[name].items() if k != 'cycles'})}",
              flush=True, file=sys.stderr)  # fmt: skip
    transport.close()
    result: dict[str, Any] = {
        "benchmark": "plugin_bench",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "mode": "driverManaged",
        "node": NODE,
        "cycles_per_plugin": args.cycles,
        "order": args.order.split(","),
        "upstream_commit": commit,
        "kubelet_metric": KUBELET_HISTOGRAM,
        "load_average_at_end": os.getloadavg(),
        "plugins": runs,
    }
    if {"imexdra", "upstream"} <= runs.keys():
        result["ours_over_upstream"] = ratios(runs["imexdra"], runs["upstream"])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--cycles", type=int, default=50, help="measured cycles per plugin (after the first)")
    parser.add_argument("--idle-seconds", type=float, default=30.0, help="the quiet window for idle CPU")
    parser.add_argument("--upstream-checkout", type=Path, default=DEFAULT_CHECKOUT)
    parser.add_argument("--order", default="imexdra,upstream", help="which plugins, in turn order")
    parser.add_argument(
        "--step-timing", action="store_true", help="run ours through steptiming.py: its prepares' steps timed"
    )
    parser.add_argument("--profile", action="store_true", help="py-spy records ours during its cycles")
    parser.add_argument("--output", type=Path, default=RESULTS / "plugin_bench.json")
    args = parser.parse_args()
    spec = NodeSpec(
        name=NODE, labels={**GPU_NODE_LABELS, "nvidia.com/gpu.clique": CLIQUE}, pod_cidr="127.100.1.0/24"
    )
    cluster = LocalCluster(nodes_specs=[spec])
    cluster.start()
    try:
        result = asyncio.run(bench(cluster, args))
    finally:
        cluster.stop()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1))
    write_plugin_plot(result, args.output.with_suffix(".png"))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
