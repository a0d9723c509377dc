"""Job start at scale: submit → every worker's channel claim prepared, 4 to 256 nodes (a benchmark).

What one run measures: a user submits a ComputeDomain and a ``batch/v1`` Job of N pods (parallelism =
completions = N), each pod taking one IMEX channel through the domain's ResourceClaimTemplate; the clock
stops when the channel claim of every pod has been prepared by the kubelet plugin of the node the pod
landed on (and the domain is Ready). Everything between is the real thing: the real
``compute-domain-controller`` process (the chart's default client rate limit, ``controller.kubeAPI``: 20
QPS / burst 40 since 2026-11-27, 5/10 before) creates the template and marks the domain Ready,
kube-controller-manager's Job controller creates the pods and its resourceclaim controller their claims,
kube-scheduler allocates each claim through DRA from the ResourceSlices the plugins published (channel-0
is one device per node, so the N pods land on N different nodes) and binds the pod. Reported per N: the
total time and its breakdown (domain Ready, all pods created, all claims allocated, all pods bound, all
prepared), the apiserver's 409 and 429 answers, the API requests by verb and resource, the controller's
own count of its writes, CPU seconds per component and peak RSS of the controller and of the plugins.

Two IMEX modes (``--mode``, default ``both``):

- host-managed (``HostManagedIMEX``): no IMEX daemons; a channel prepare needs only the domain.
- driver-managed (the default mode of the driver): a worker's channel prepare labels its node, the
  controller's per-domain DaemonSet then gets a daemon pod on that node (real DaemonSet controller,
  resourceclaim controller and scheduler, the daemon claim prepared by the node's real plugin), the
  daemon announces its clique on its pod and becomes Ready, the controller publishes the node Ready in
  the domain's ComputeDomainClique, and the plugin's retrying channel prepare sees it and succeeds.
  Reported in addition, per node and as first/last over nodes: daemon pod created, its daemon claim
  created (by kcm), pod bound, daemon claim prepared, Running, clique label set, listed in its clique,
  Ready, published Ready — and the p50 and max of each step between them
  (``daemons.steps_per_node``), which is where the time goes.

Three series:

- ``kubelets`` (host-managed): real kubelets (on fakecri) for N ≤ ``--max-kubelets`` (default 18:
  what this 2-core machine holds next to the control plane). The plugin runs as a host process per
  node, registered with that node's kubelet through its plugin registry, and the kubelet itself calls
  NodePrepareResources; "prepared" is read off each plugin's checkpoint (the claim's state
  ``PrepareCompleted``, polled every 50 ms), and "pods Running" is reported next to it.
- ``simulated`` (host-managed) and ``simulated_driver_managed``: for every N, a node simulator. Each node
  is a Node object (GB200 labels, clique label per 18-node rack, status Ready with allocatable capacity)
  with a Lease renewed every 10 s as a kubelet does (without it the node lifecycle controller would mark
  the nodes unreachable and flip every pod on them, daemon pods included, to NotReady), and one real
  ``compute-domain-kubelet-plugin`` process of its own (its own state dir, fake NVML, ``/proc/devices``
  and driver root, its own DRA socket, upstream's client rate limit 5 QPS / burst 10); host-managed (here
  and in ``kubelets``), also the node's own host ``nvidia-imex`` (the sim's fake, ``benchlib.HostImex``),
  up and answering ``READY`` on the plugin's ``IMEX_HOST_SOCKET_PATH`` before the plugin starts, since the
  plugin runs the driver root's ``nvidia-imex-ctl -q`` before each channel prepare (the fake
  ``nvidia-imex-ctl`` is a Python program: 0.05 s a run idle, 0.3 s at load 20 on this machine, where the
  driver's native tool takes milliseconds; host-managed prepare times include it). The simulator then does
  what a kubelet does for a pod bound to its node: it watches pods and claims, and once a pod is bound and
  its claim is reserved for it, it calls that node's plugin ``NodePrepareResources`` over the plugin's
  gRPC socket with the kubelet's 45 s timeout; a claim left out of the answer (the plugin's own 45 s retry
  budget ran out) or failed is retried after the kubelet's pod-sync backoff, 10–15 s
  (``daemonsim.kubelet_prepare``). Then it reports the pod Running. Driver-managed, it also plays kubelet,
  container runtime and daemon of the IMEX daemon pods (``daemonsim.DaemonKubelet``: prepare the daemon
  claim through the node's plugin, Running with an IP, the clique label set by the real daemon's code,
  Ready at the first startup-probe tick after the controller listed the node and
  ``--imex-formation-seconds`` passed). No IMEX runs, so real IMEX formation adds its own time to every
  driver-managed figure. On teardown it unprepares every claim over the socket and deletes the pods with
  grace period 0 (what a kubelet confirms). Nodes are added as N grows, so the run for N has exactly N
  nodes and N plugins.

kube-controller-manager and kube-scheduler run with their default client rate limits (20 and 50 QPS),
as ``LocalCluster`` starts them: for 256 pods the resourceclaim controller alone needs 512 requests
(create the claim, record it in the pod's status), which bounds the job start from below at ≈ 25 s
on any driver; driver-managed doubles that (every daemon pod has a claim too). ``--profile-nodes``
(default 18) records the controller and node-0's plugin with ``py-spy`` (non-blocking, 100 Hz) during
the simulated runs of that size and reports the hottest functions. ``--controller-command "<cmd>"``
runs another controller implementation against the same nodes and workload after ours and reports
ours/other ratios (placeholders: see ``--help``); with ``--other-daemons upstream`` its simulated daemons
write their own clique entries, as upstream's daemons do (``daemonsim``), so upstream's controller can
be measured driver-managed with daemons present.

Targets: 18-node job ≤ 10 s; 256 pods ≤ 60 s with 0 × 429 and 0 × 409. Output: JSON on stdout and in
``bench/results/jobstart_bench.json``, plot in ``bench/results/jobstart_bench.png`` (``--results-name``
names others). ``--binding-conditions both`` adds a driver-managed series with gate
ComputeDomainBindingConditions on beside the one with it off (docs/binding-conditions.md): per run,
``daemons.workers_bound_before_daemon_ready`` and ``daemons.worker_bound_to_prepared_s`` say whether a
worker was bound before its node's daemon was Ready and how long a bound worker then waited.

Run: ``.venv/bin/python bench/jobstart_bench.py [--nodes 4,18,64,144,256] [--mode both] [--quick]``
after ``make bench`` (``--quick``: 4 and 18 nodes, no kubelet series). One plugin process holds
≈ 64 MiB, so 256 of them need ≈ 16 GiB; the run refuses sizes whose plugins would not fit in the
memory available (each mode's fleet is stopped before the next one starts).

This module owns the command line, the results file and the verdict against the targets; the rest is
``jobstart_api`` (the workload and the API connection), ``jobstart_fleet`` (the nodes and their
plugins), ``jobstart_watch`` (the record of one job start, the node simulator, the readings) and
``jobstart_run`` (one job start, its teardown, a series over sizes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
from typing import Any

from benchlib import (
    CONTROLLER_COMMAND_HELP,
    RESULTS,
    add_controller_rate_args,
)
from jobstart_run import SERIES, series, short
from plotting import write_jobstart_plot
from upstream_build import command_upstream_commit

from imexdra_sim.localcluster.cluster import LocalCluster

TARGETS_S = {18: 10.0, 256: 60.0}
DEFAULT_NODES = (4, 18, 64, 144, 256)
QUICK_NODES = (4, 18)


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
                "claim_floor_s": ours["claim_floor_s"],
                "floor_ratio": round(ours["submit_to_all_prepared_s"] / ours["claim_floor_s"], 2)
                if ours["claim_floor_s"]
                else None,
                "within_1_2x_floor": ours["submit_to_all_prepared_s"] <= 1.2 * ours["claim_floor_s"],
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
        "upstream_commit": command_upstream_commit(args.controller_command),
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
        results["binding_conditions"] = args.binding_conditions
        gate_values = {"off": (False,), "on": (True,), "both": (False, True)}[args.binding_conditions]
        for binding_conditions in gate_values:
            with LocalCluster(nodes_specs=[], keep_run_dir=args.keep) as cluster:
                key = "simulated_driver_managed_binding" if binding_conditions else "simulated_driver_managed"
                results[key] = await series(
                    cluster,
                    args.nodes,
                    args,
                    kubelets=False,
                    host_managed=False,
                    binding_conditions=binding_conditions,
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
        "--other-daemons",
        choices=("imexdra", "upstream"),
        default="imexdra",
        help="driver-managed, the --controller-command's run: whose daemon protocol the simulated daemons "
        "follow (upstream: each daemon writes its own ComputeDomainClique entry; imexdra: the controller "
        "publishes them)",
    )
    parser.add_argument(
        "--binding-conditions",
        choices=("off", "on", "both"),
        default="off",
        help="driver-managed: gate ComputeDomainBindingConditions in our controller and plugins; both: "
        "a series with it off, then one with it on, each on a cluster of its own (ours only)",
    )
    parser.add_argument(
        "--results-name",
        default="jobstart_bench",
        help="bench/results/<name>.json and .png (another name keeps the committed results)",
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
    add_controller_rate_args(parser)
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
    (RESULTS / f"{args.results_name}.json").write_text(json.dumps(results, indent=1))
    write_jobstart_plot(results, RESULTS / f"{args.results_name}.png", targets_s=TARGETS_S)
    printable = {**results}
    for series_key in SERIES:
        if series_key in printable:
            printable[series_key] = [short(run) for run in printable[series_key]]
    print(json.dumps(printable, indent=1))


if __name__ == "__main__":
    main()
