"""The kubelet plugin through the real kubelet, ours and upstream's in one run (a benchmark, not a test).

Issue 43 item 2, "on one node and on many". One local cluster (real etcd, apiserver, scheduler,
controller-manager) with ``--nodes`` fakecri nodes (default 1), each running a real kubelet (1.36.x):
``bench-node``, ``bench-node-2``…, node ``i`` with pod range ``127.100.<i>.0/24`` and the clique label
(``plugin_nodes``). Both plugins register the driver name ``compute-domain.nvidia.com``, so they take
turns: the first runs one process per node, its cycles, and is stopped (SIGTERM), its ResourceSlices
are deleted, every kubelet is seen to drop its registration, every node's plugin directory and CDI
root are emptied; then the second runs the same cycles. Same nodes, same kubelets, same mock
``libnvidia-ml.so.1`` (driver roots written once), same claims.

Both run as host processes on the node, as the integration tier runs ours: ours is the
``compute-domain-kubelet-plugin`` of ``runtimevenv`` (what the image installs), upstream's is its
binary built from a checkout by ``bench/upstream.sh run-plugin`` (docs/upstream-plugin.md has its
flags and what it needs of a node). Both get the admin kubeconfig and their default client rate limit
(5 QPS, burst 10).

IMEX modes (``--mode``, default ``both``: driver-managed, then host-managed, every plugin of
``--order`` in each). Driver-managed: the binaries' defaults (no gate, no mode). Host-managed: ours
with gate ``HostManagedIMEX`` and ``IMEX_MODE=hostManaged``, upstream's (v0.5.0 has the mode) with its
own gate ``HostManagedIMEXDaemon`` and ``--imex-mode=hostManaged``; both pointed at the node's host
``nvidia-imex`` (``benchlib.HostImex``, one per node at ``.250`` of its pod range, started before the
first turn, as a host's service is up before any plugin), whose ``nvidia-imex-ctl -q`` each runs
before every channel prepare. Upstream runs it chrooted into its container driver root, so its turn
gets a root view as that root (``plugin_processes.ROOT_VIEW``, docs/upstream-plugin.md
"Host-managed").

The daemon side: driver-managed, a channel prepare waits until the node's IMEX daemon is Ready in
the domain. No daemon runs here: before the cycles the bench writes what the controller writes once
every node's daemon is Ready, the ComputeDomainClique ``<domain UID>.<clique>`` with every node's
daemon ``Ready`` (which ours reads, and upstream reads first under its default ComputeDomainCliques
gate) and the domain's ``status.nodes`` with every node ``Ready`` (upstream's fallback). Every cycle
uses that one domain, so a prepare finds the daemon Ready: what is measured is the steady state of
nodes whose daemons are up, not the daemons' start. The bench also stands in for the controller's
workload ResourceClaimTemplate (``imexdra_sim.builders.channel_template``). Host-managed, no daemon
is asked for: the same domain and template serve.

A cycle: create a pod referencing the template (nodeSelector: its node) → the resourceclaim
controller makes its claim, the scheduler allocates channel 0 → the kubelet's NodePrepareResources →
pod Running → delete the pod → the kubelet's NodeUnprepareResources, the pod and its claim gone.
Cycles are sequential within a node (channel 0 holds one prepared claim per node) and concurrent
across nodes, each node its own pod stream (``plugin_turn.run_turns``). The first cycle of each
plugin on each node is reported apart (``first_cycle``), then a quiet window (``--idle-seconds``,
default 30, the same window on every node) with no work measures idle CPU, then ``--cycles`` cycles
per node.

Measured per cycle on each node: that node's kubelet's own ``dra_grpc_operations_duration_seconds``
(its /metrics through the apiserver's node proxy, deltas of the histogram's sum and count per method,
so a cycle with one call each gives that call's time exactly), beside the plugin's own
``nvidia_dra_request_duration_seconds`` (its handler's time, without the gRPC and the claim GET around
it); pod create → Running seen by the bench (polling the pod); the CDI devices fakecri's
CreateContainer got; the plugin's time on CPU (``schedstat`` of every thread, ns, summed over its
process tree) from cycle start to cycle end. Per plugin process: RSS (VmRSS, VmHWM; summed over the
process tree) after the idle window and after the cycles; idle CPU per second, in all and by thread
name; ``utime + stime`` over all cycles as a check (it also counts threads that ended).

With ``--nodes N`` above 1, a plugin's figures are pooled (``plugin_nodes.pool``): the percentiles
over every node's cycles together, RSS and idle CPU as the mean over its N processes (with the max),
and each node's own figures, as one node's run reports them, under ``by_node``; ``ours_over_upstream``
is computed from the pooled figures. Each node's waits poll N times less often (``plugin_turn.POLL_S``)
so the bench's own load on the apiserver stays one node's.

``--step-timing`` runs ours through ``steptiming.py`` (its prepares' steps timed from inside);
``--profile`` records ours with py-spy during its cycles (on the first node). Both change what they
measure a little: the committed side-by-side runs without them.

Run: ``flock /tmp/imexdra-heavy.lock .venv/bin/python bench/plugin_bench.py [--cycles 50] [--mode
both] [--upstream-checkout /tmp/upstream-src] [--order imexdra,upstream]`` after ``make bench``;
``--nodes 8`` for eight nodes. Output: JSON on stdout and in ``bench/results/plugin_bench.json``
(``--output`` names another): ``node`` (one node) or ``nodes`` (``count`` and ``names``),
``upstream_commit`` (read off the binary that ran, ``upstream_build``), and per mode under
``by_mode.<mode>`` the plugins' turns (``plugins.<name>``, with ``by_node`` above one node) and
``ours_over_upstream``; one plot per mode beside it (``<name>_<mode>.png``). ``plugin_bench.json`` and
``plugin_bench_400.json``, from before ``--mode``, hold one driver-managed run with ``mode`` and
``plugins`` at the top. One plugin's turn is ``plugin_turn``, its processes ``plugin_processes``, the
nodes and the pooling ``plugin_nodes``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import steptiming
from benchlib import (
    CLIQUE,
    DRIVER,
    DRIVER_NAMESPACE,
    RESULTS,
    HostImex,
    install_crds,
    kubectl_apply,
)
from plugin_nodes import daemons, node_address, node_names, pod_cidr, pool
from plugin_plot import write_plugin_plot
from plugin_processes import NodeFiles, Plugin, distinct_port, our_plugin, upstream_plugin
from plugin_turn import KUBELET_HISTOGRAM, NAMESPACE, POLL_S, TEMPLATE, Turn, run_turns
from upstream_build import binary_commit, upstream_binary

from imexdra.common.kube.connection import connect
from imexdra_sim.builders import channel_template, compute_domain
from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.localcluster.nodes import GPU_NODE_LABELS, NodeSpec

DOMAIN = "bench"
DEFAULT_CHECKOUT = Path("/tmp/upstream-src")
#: ``--mode``: the IMEX modes a run measures, in turn order, as the plugins' ``IMEX_MODE`` spells them.
MODES = {
    "driver-managed": ("driverManaged",),
    "host-managed": ("hostManaged",),
    "both": ("driverManaged", "hostManaged"),
}
#: A node's host nvidia-imex (host-managed): this address of the node's pod range (``node_address``).
HOST_IMEX_HOST = 250
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


def install_api(cluster: LocalCluster, nodes: list[str]) -> str:
    """CRDs, DeviceClasses, namespaces, the domain, its template, every node's daemon; the domain UID."""
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
        compute_domain(DOMAIN, NAMESPACE, num_nodes=len(nodes)),
    )
    uid = cluster.kubectl(
        "get", "computedomain", DOMAIN, "-n", NAMESPACE, "-o", "jsonpath={.metadata.uid}"
    ).stdout
    ready = daemons(nodes, CLIQUE)
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
            "daemons": ready,
        },
    )
    # status.nodes spells a daemon as the clique does, its node under ``name``.
    listed = [{"name": d["nodeName"], **{k: v for k, v in d.items() if k != "nodeName"}} for d in ready]
    status = {"status": {"status": "Ready", "nodes": listed}}
    cluster.kubectl(
        "patch", "computedomain", DOMAIN, "-n", NAMESPACE, "--subresource=status", "--type=merge",
        "-p", json.dumps(status),
    )  # fmt: skip
    return uid


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


def step_record(cluster: LocalCluster, mode: str, node: str) -> Path:
    """Where ``--step-timing`` has ours on ``node`` in ``mode`` record its steps."""
    assert cluster.run_dir is not None
    return cluster.run_dir / f"imexdra-{mode}-{node}-steps.txt"


def plugin_maker(
    name: str, mode: str, cluster: LocalCluster, files: NodeFiles, args: argparse.Namespace
) -> Callable[[], Plugin]:
    """How to start plugin ``name`` in IMEX ``mode`` on the node of ``files``."""
    assert cluster.run_dir is not None
    node = files.node.name
    log = cluster.run_dir / f"{name}-{mode}-{node}-plugin.log"
    socket = files.host_imex_socket if mode == "hostManaged" else None
    if name == "imexdra":
        steps = step_record(cluster, mode, node) if args.step_timing else None
        return lambda: our_plugin(files, cluster.kubeconfig, log, steps, host_socket=socket)
    if name == "upstream":
        return lambda: upstream_plugin(files, cluster.kubeconfig, args.upstream_checkout, log, socket)
    raise ValueError(f"--order: unknown plugin {name!r} (imexdra, upstream)")


async def bench(cluster: LocalCluster, args: argparse.Namespace) -> dict[str, Any]:
    order = args.order.split(",")
    modes = MODES[args.mode]
    nodes = node_names(args.nodes)
    # The commit of the binary run-plugin runs (built first if missing), read before any turn: fails fast.
    commit = None
    if "upstream" in order:
        commit = binary_commit(upstream_binary("plugin", args.upstream_checkout))
    install_api(cluster, nodes)
    files = {node: NodeFiles.write(cluster.node(node)) for node in nodes}
    makers = {
        (name, mode, node): plugin_maker(name, mode, cluster, files[node], args)
        for mode in modes
        for name in order
        for node in nodes
    }
    host_imex = []
    if "hostManaged" in modes:  # each node's nvidia-imex.service, up before any plugin, as on a real node
        for index, node in enumerate(nodes, 1):
            host_imex.append(HostImex(files[node].base, node_address(index, HOST_IMEX_HOST), distinct_port()))
            host_imex[-1].start()
        for service in host_imex:
            await service.wait_ready()
    transport = connect(cluster.kubeconfig).transport(user_agent="plugin-bench")
    by_mode: dict[str, dict[str, Any]] = {}
    try:
        for mode in modes:
            runs = {}
            for name in order:
                turns = [
                    Turn(
                        makers[name, mode, node](),
                        files[node],
                        transport,
                        cluster,
                        poll_s=POLL_S * len(nodes),
                        profile=args.profile and name == "imexdra" and node == nodes[0],
                    )
                    for node in nodes
                ]
                by_node = dict(
                    zip(nodes, await run_turns(turns, args.idle_seconds, args.cycles), strict=True)
                )
                if name == "imexdra" and args.step_timing:
                    for node, turn in by_node.items():
                        turn["plugin_steps_p50_ms"] = steptiming.steps(step_record(cluster, mode, node))
                # One node: its turn as it is, the keys of the runs before --nodes.
                runs[name] = by_node[nodes[0]] if len(nodes) == 1 else pool(name, by_node)
                brief = {k: v for k, v in runs[name].items() if k not in ("cycles", "by_node")}
                print(f"[plugin-bench] {name} {mode}: {json.dumps(brief)}", flush=True, file=sys.stderr)
            entry: dict[str, Any] = {"mode": mode, "plugins": runs}
            if {"imexdra", "upstream"} <= runs.keys():
                entry["ours_over_upstream"] = ratios(runs["imexdra"], runs["upstream"])
            by_mode[mode] = entry
    finally:
        transport.close()
        for service in host_imex:
            service.stop()
    placement = {"node": nodes[0]} if len(nodes) == 1 else {"nodes": {"count": len(nodes), "names": nodes}}
    return {
        "benchmark": "plugin_bench",
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "modes": list(modes),
        **placement,
        "cycles_per_plugin": args.cycles,
        "order": order,
        "upstream_commit": commit,
        "kubelet_metric": KUBELET_HISTOGRAM,
        "load_average_at_end": os.getloadavg(),
        "by_mode": by_mode,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--cycles", type=int, default=50, help="measured cycles per plugin and node (after the first)"
    )
    parser.add_argument(
        "--nodes", type=int, default=1, help="fakecri nodes, each its own kubelet, plugin and pod stream"
    )
    parser.add_argument("--idle-seconds", type=float, default=30.0, help="the quiet window for idle CPU")
    parser.add_argument("--upstream-checkout", type=Path, default=DEFAULT_CHECKOUT)
    parser.add_argument("--order", default="imexdra,upstream", help="which plugins, in turn order")
    parser.add_argument(
        "--mode",
        choices=tuple(MODES),
        default="both",
        help="IMEX modes, each run for every plugin of --order (both: driver-managed first)",
    )
    parser.add_argument(
        "--step-timing", action="store_true", help="run ours through steptiming.py: its prepares' steps timed"
    )
    parser.add_argument("--profile", action="store_true", help="py-spy records ours during its cycles")
    parser.add_argument("--output", type=Path, default=RESULTS / "plugin_bench.json")
    args = parser.parse_args()
    if args.nodes < 1:
        parser.error("--nodes: at least 1")
    specs = [
        NodeSpec(
            name=name, labels={**GPU_NODE_LABELS, "nvidia.com/gpu.clique": CLIQUE}, pod_cidr=pod_cidr(index)
        )
        for index, name in enumerate(node_names(args.nodes), 1)
    ]
    cluster = LocalCluster(nodes_specs=specs)
    cluster.start()
    try:
        result = asyncio.run(bench(cluster, args))
    finally:
        cluster.stop()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1))
    for mode, entry in result["by_mode"].items():  # one plot per mode, named after it
        write_plugin_plot({**result, **entry}, args.output.with_name(f"{args.output.stem}_{mode}.png"))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
