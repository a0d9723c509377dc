"""ComputeDomain controller: create→Ready latency, burst throughput, writes per lifecycle, RSS (a benchmark).

Setup: a real local control plane without nodes (no domain here needs a daemon: numNodes is 0) and the
CRDs; the controller runs as the real ``compute-domain-controller`` process, authenticated as admin,
with the client rate limit raised to ``--kube-api-qps``/``--kube-api-burst`` (upstream's 5/10 would
make any burst a measurement of the throttle). Phases:

1. single domain, driver-managed and host-managed: create one ComputeDomain, wait until a watch shows
   ``status.status=Ready``, delete it and wait until it is gone; ``--single`` times per mode. Latency is
   measured from just before the create request to the watch event. The controller's own write counter
   gives the API writes per domain lifecycle (create + delete).
2. burst: ``--burst`` domains created by 50 concurrent clients (with the controller in ``--burst-mode``,
   host-managed by default); time from the first create to the last Ready, and the time until all of
   them are deleted again after a burst delete.
3. memory: ``--total`` domains Ready at once (same mode); the controller's RSS (and at idle).
4. burst under channel isolation (``burst_channel_isolation``, ours only, ``controller_channels``):
   ``--channel-burst`` (default 2000) host-managed domains created at once against the controller run
   with ``--imex-isolation=channel``; time to all Ready, every ``status.channel`` present and unique
   (asserted: the run fails after writing its results otherwise), API writes per domain and 409s
   during the phase. ``--channel-burst 0`` skips it.

A calibration first measures how many creates per second this machine's apiserver sustains, which
bounds any burst from below (4 writes per host-managed domain: the user's and the controller's 3).
The apiserver's ``apiserver_request_total{code="409"}`` on every resource the controller writes, and
the controller's own 409 count, give the conflicts. Output: JSON on stdout and in
``bench/results/controller_bench.json``, and a plot in ``bench/results/controller_bench.png``.
Targets: p50 ≤ 100 ms single, burst all Ready ≤ 10 s, 0 conflicts. Each mode starts with one untimed
domain (a warm-up). Writes per lifecycle are also read off the apiserver's ``apiserver_request_total``
(write verbs on the controller's resources, less the user's create and delete), which works for any
implementation.

``--controller-command "<cmd>"`` runs another controller implementation through the same phases after
ours (placeholders such as ``{kubeconfig}`` and ``{imex_mode}``: see ``--help``; ``--other-modes``
limits its single-domain modes) and adds its results under ``other_controller`` and ours/other ratios
under ``ratios_ours_over_other``. Upstream's Go controller, built from a checkout:
``bench/upstream.sh`` (bench/README.md, "Side by side with upstream's controller").

Run: ``.venv/bin/python bench/controller_bench.py`` after ``make bench`` (or ``make k8s`` and
``.venv/bin/pip install -e '.[bench]'``).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import operator
import os
import statistics
import time
from typing import Any

from benchlib import (
    CONTROLLER_COMMAND_HELP,
    CRDS,
    DRIVER_NAMESPACE,
    OUR_CONTROLLER_COMMAND,
    RESULTS,
    BenchController,
)
from controller_api import (
    CONTROLLER_RESOURCES,
    NAMESPACE,
    Observer,
    User,
    apiserver_write_counts,
    burst,
    burst_delete,
    conflicts_seen,
    hold,
    writes,
)
from controller_channels import POOL, burst_channel_isolation
from plotting import write_controller_plot
from stats import percentile
from upstream_build import command_upstream_commit

from imexdra.common.kube.connection import connect
from imexdra.common.kube.models.core_v1 import ConfigMap
from imexdra.common.kube.models.networking_v1 import NetworkPolicy
from imexdra.common.kube.transport import resource_path
from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.promtext import apiserver_metrics, metric
from imexdra_sim.waiting import poll_async

TARGET_P50_MS = 100.0
MODES = ("driver_managed", "host_managed")
TARGET_BURST_S = 10.0


async def single_domains(
    user: User,
    observer: Observer,
    controller: BenchController,
    prefix: str,
    count: int,
    cluster: LocalCluster,
) -> dict[str, Any]:
    before = controller.metrics()
    apiserver_before = apiserver_write_counts(apiserver_metrics(cluster))
    cpu_before = controller.cpu_seconds()
    latencies: list[float] = []
    deletions: list[float] = []
    for i in range(count):
        name = f"{prefix}-{i}"
        started = time.monotonic()
        await user.create(name)
        await observer.until(functools.partial(operator.contains, observer.ready, name), within=30)
        latencies.append((observer.ready[name] - started) * 1000)
        started = time.monotonic()
        await user.delete(name)
        await observer.until(functools.partial(operator.contains, observer.gone, name), within=30)
        deletions.append((observer.gone[name] - started) * 1000)
        await asyncio.sleep(0.05)
    after = controller.metrics()
    apiserver_after = apiserver_write_counts(apiserver_metrics(cluster))
    by_kind = {k: (v - apiserver_before[k]) / count for k, v in apiserver_after.items()}
    return {
        "domains": count,
        "create_to_ready_ms": {
            "p50": round(statistics.median(latencies), 1),
            "p90": round(percentile(latencies, 0.9), 1),
            "max": round(max(latencies), 1),
        },
        "delete_to_gone_ms": {"p50": round(statistics.median(deletions), 1), "max": round(max(deletions), 1)},
        "api_writes_per_lifecycle": round((writes(after) - writes(before)) / count, 2),
        # Any implementation: the apiserver's count, less the user's create and delete; it includes the
        # garbage collector's deletes of owned objects.
        "apiserver_writes_per_lifecycle": round(sum(by_kind.values()) - 2, 2),
        # The user's create and delete are in POST and DELETE computedomains.
        "apiserver_writes_per_lifecycle_by_kind": {k: round(v, 2) for k, v in by_kind.items() if v},
        "controller_cpu_ms_per_lifecycle": round((controller.cpu_seconds() - cpu_before) * 1000 / count, 2),
        "samples_ms": [round(x, 1) for x in latencies],
    }


async def apiserver_write_capacity(cluster: LocalCluster, prefix: str, count: int = 300) -> float:
    """Creates per second the apiserver sustains for 50 concurrent writers on the controller's transport.

    A calibration: a burst costs the apiserver 4 writes per host-managed domain (the user's create and
    the controller's 3), so ``4 x domains / capacity`` is the floor no controller can beat on this machine.
    """
    transport = connect(cluster.kubeconfig).transport(user_agent="imexdra-bench")
    gate = asyncio.Semaphore(50)
    path = resource_path(ConfigMap, namespace=NAMESPACE)

    async def create(i: int) -> None:
        async with gate:
            await transport.request("POST", path, body={"metadata": {"name": f"{prefix}-calibrate-{i}"}})

    started = time.monotonic()
    await asyncio.gather(*(create(i) for i in range(count)))
    elapsed = time.monotonic() - started
    transport.close()
    return count / elapsed


async def run(cluster: LocalCluster, args: argparse.Namespace, command: str) -> dict[str, Any]:
    """Every phase against the controller ``command`` starts; the domains are all gone at the end."""
    client = connect(cluster.kubeconfig).kube(field_manager="imexdra-bench")
    user = User(connect(cluster.kubeconfig).transport(user_agent="imexdra-bench"))
    observer = Observer(client)
    watcher = asyncio.create_task(observer.run())
    conflicts_before = conflicts_seen(cluster)
    assert cluster.run_dir is not None
    label = "ours" if command == OUR_CONTROLLER_COMMAND else "other"
    results: dict[str, Any] = {
        "controller_command": None if command == OUR_CONTROLLER_COMMAND else command,
        "client_rate_limit": {"qps": args.qps, "burst": args.burst_limit},
        "sizes": {
            "single": args.single,
            "burst": args.burst,
            "total": args.total,
            "channel_burst": args.channel_burst,
        },
        "load_average_at_start": os.getloadavg(),
        "cpus": os.cpu_count(),
        "apiserver_creates_per_s": round(await apiserver_write_capacity(cluster, label), 1),
    }
    own_conflicts = 0.0
    modes = MODES if label == "ours" else tuple(args.other_modes)
    try:
        for mode in modes:
            controller = BenchController(
                cluster.kubeconfig,
                cluster.run_dir / f"{label}-{mode}.log",
                host_managed=mode == "host_managed",
                qps=args.qps,
                burst=args.burst_limit,
                command=command,
            )
            controller.start()
            try:
                await controller.wait_ready()
                prefix = f"{label}-{mode.replace('_', '-')}"
                # One untimed domain first: the controller's caches are synced once it is Ready.
                await single_domains(user, observer, controller, f"{prefix}-warmup", 1, cluster)
                results[f"single_{mode}"] = await single_domains(
                    user, observer, controller, prefix, args.single, cluster
                )
                if mode == args.burst_mode:
                    results["idle_rss_mib"] = controller.rss_mib()
                    burst_names = [f"{label}-burst-{i}" for i in range(args.burst)]
                    results["burst"] = {
                        "controller_mode": mode,
                        **await burst(user, observer, controller, f"{label}-burst", args.burst),
                    }
                    results["burst"]["delete_all_gone_s"] = await burst_delete(user, observer, burst_names)
                    held = await hold(user, observer, f"{label}-mem", args.total)
                    await asyncio.sleep(2)
                    results["rss_mib_with_domains"] = {"domains": args.total, **held, **controller.rss_mib()}
                    # Upstream's deletion of 500 took 190 s in the side-by-side run: 1000 get longer.
                    await burst_delete(
                        user, observer, [f"{label}-mem-{i}" for i in range(args.total)], within=900
                    )
                own_conflicts += metric(controller.metrics(), "rest_client_requests_total", code="409")
            finally:
                controller.stop()
    finally:
        watcher.cancel()
        user.transport.close()
        client.close()
    after = conflicts_seen(cluster)
    results["conflicts"] = {
        "apiserver_409_by_resource": {r: after[r] - conflicts_before[r] for r in CONTROLLER_RESOURCES},
        "controller_409": own_conflicts,
    }
    # After the conflicts above were read, so phases 1-3 keep their meaning; this phase counts its own.
    if args.channel_burst > 0 and label == "ours":
        results["burst_channel_isolation"] = await channel_phase(cluster, args, label)
    results["load_average_at_end"] = os.getloadavg()
    results["verdict"] = verdict(results)
    return results


async def channel_phase(cluster: LocalCluster, args: argparse.Namespace, label: str) -> dict[str, Any]:
    """Phase 4 with a watch and a user of its own (``run`` closes its own at the end of phases 1-3)."""
    client = connect(cluster.kubeconfig).kube(field_manager="imexdra-bench")
    user = User(connect(cluster.kubeconfig).transport(user_agent="imexdra-bench"))
    observer = Observer(client)
    watcher = asyncio.create_task(observer.run())
    try:
        return await burst_channel_isolation(cluster, args, user, observer, label)
    finally:
        watcher.cancel()
        user.transport.close()
        client.close()


def ratios(ours: dict[str, Any], other: dict[str, Any]) -> dict[str, float | None]:
    """Ours / other for the headline figures (below 1: ours is faster or smaller)."""

    def ratio(a: float, b: float) -> float | None:
        return round(a / b, 3) if b else None

    modes = [mode for mode in MODES if f"single_{mode}" in other]
    pairs: dict[str, tuple[float, float]] = {}
    for mode in modes:
        single, theirs = ours[f"single_{mode}"], other[f"single_{mode}"]
        pairs[f"single_{mode}_p50"] = (
            single["create_to_ready_ms"]["p50"],
            theirs["create_to_ready_ms"]["p50"],
        )
        pairs[f"single_{mode}_delete_to_gone_p50"] = (
            single["delete_to_gone_ms"]["p50"],
            theirs["delete_to_gone_ms"]["p50"],
        )
        pairs[f"apiserver_writes_per_lifecycle_{mode}"] = (
            single["apiserver_writes_per_lifecycle"],
            theirs["apiserver_writes_per_lifecycle"],
        )
    pairs["burst_all_ready_s"] = (ours["burst"]["all_ready_s"], other["burst"]["all_ready_s"])
    pairs["burst_delete_all_gone_s"] = (
        ours["burst"]["delete_all_gone_s"],
        other["burst"]["delete_all_gone_s"],
    )
    pairs["idle_rss_mib"] = (ours["idle_rss_mib"]["VmRSS"], other["idle_rss_mib"]["VmRSS"])
    pairs["rss_mib_with_domains"] = (
        ours["rss_mib_with_domains"]["VmRSS"],
        other["rss_mib_with_domains"]["VmRSS"],
    )
    return {key: ratio(a, b) for key, (a, b) in pairs.items()}


def verdict(results: dict[str, Any]) -> dict[str, Any]:
    singles = [results[f"single_{mode}"] for mode in MODES if f"single_{mode}" in results]
    p50 = max(single["create_to_ready_ms"]["p50"] for single in singles)
    conflicts = (
        sum(results["conflicts"]["apiserver_409_by_resource"].values())
        + results["conflicts"]["controller_409"]
    )
    floor = 4 * results["burst"]["domains"] / results["apiserver_creates_per_s"]
    return {
        "burst_floor_s_on_this_apiserver": round(floor, 1),
        "single_p50_ms": p50,
        "single_p50_target_met": p50 <= TARGET_P50_MS,
        "burst_all_ready_s": results["burst"]["all_ready_s"],
        "burst_target_met": results["burst"]["all_ready_s"] <= TARGET_BURST_S,
        "conflicts": conflicts,
        "conflicts_target_met": conflicts == 0,
    } | channel_verdict(results)


def channel_verdict(results: dict[str, Any]) -> dict[str, Any]:
    """Phase 4's headline: all Ready with unique channels, and no conflict (empty when it did not run)."""
    phase = results.get("burst_channel_isolation")
    if phase is None:
        return {}
    conflicts = (
        sum(phase["conflicts"]["apiserver_409_by_resource"].values()) + phase["conflicts"]["controller_409"]
    )
    return {
        "channel_burst_domains": phase["domains"],
        "channel_burst_all_ready_s": phase["all_ready_s"],
        "channel_burst_channels_unique": phase["channels"]["unique"],
        "channel_burst_apiserver_writes_per_domain": phase["apiserver_writes_per_domain"],
        "channel_burst_conflicts": conflicts,
        "channel_burst_conflicts_target_met": conflicts == 0,
    }


def printable(results: dict[str, Any]) -> dict[str, Any]:
    """``results`` without the per-domain samples (they stay in the JSON file)."""
    short: dict[str, Any] = json.loads(json.dumps(results))
    for mode in MODES:
        short.get(f"single_{mode}", {}).pop("samples_ms", None)
    short["burst"].pop("ready_curve_s")
    if "burst_channel_isolation" in short:
        short["burst_channel_isolation"].pop("ready_curve_s")
    return short


async def owned_objects_collected(cluster: LocalCluster, within: float = 600) -> None:
    """Until the garbage collector has removed our run's NetworkPolicies (owned by its DaemonSets).

    Their deletes would otherwise land in the next controller's phases and be counted as its writes
    (2026-12-03: 8.9 per lifecycle in upstream's single-domain phase).
    """
    transport = connect(cluster.kubeconfig).transport(user_agent="imexdra-bench")
    path = resource_path(NetworkPolicy, namespace=DRIVER_NAMESPACE)

    async def collected() -> bool:
        return not json.loads((await transport.request("GET", path)).body)["items"]

    try:
        await poll_async("our NetworkPolicies garbage-collected", collected, within=within, interval=0.5)
    finally:
        transport.close()


async def run_all(cluster: LocalCluster, args: argparse.Namespace) -> dict[str, Any]:
    upstream_commit = command_upstream_commit(args.controller_command)  # before the runs: fails fast
    results = await run(cluster, args, OUR_CONTROLLER_COMMAND)
    if args.controller_command:
        results["upstream_commit"] = upstream_commit
        await owned_objects_collected(cluster)
        try:
            other = await run(cluster, args, args.controller_command)
        except Exception as error:  # ours are measured: record why the other is not
            results["other_controller"] = {"error": f"{type(error).__name__}: {error}"}
            return results
        results["other_controller"] = other
        results["ratios_ours_over_other"] = ratios(results, other)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--single", type=int, default=30, help="domains per mode in the single-domain phase")
    parser.add_argument("--burst", type=int, default=500, help="domains created at once (in --burst-mode)")
    parser.add_argument("--total", type=int, default=1000, help="domains held for the memory reading")
    parser.add_argument(
        "--channel-burst",
        type=int,
        default=2000,
        help=f"host-managed domains created at once under --imex-isolation=channel (0: skip; at most {POOL})",
    )
    parser.add_argument("--qps", type=float, default=500.0, help="controller --kube-api-qps")
    parser.add_argument("--burst-limit", type=int, default=1000, help="controller --kube-api-burst")
    parser.add_argument("--controller-command", default=None, help=CONTROLLER_COMMAND_HELP)
    parser.add_argument(
        "--burst-mode",
        choices=MODES,
        default="host_managed",
        help="the controller mode the burst, delete and memory phases run in (driver_managed to compare "
        "with an upstream release without HostManagedIMEX)",
    )
    parser.add_argument(
        "--other-modes",
        nargs="+",
        choices=MODES,
        default=list(MODES),
        help="single-domain modes the --controller-command runs (upstream releases without HostManagedIMEX: "
        "driver_managed); it must include --burst-mode",
    )
    args = parser.parse_args()
    if args.burst_mode not in args.other_modes:
        parser.error(f"--other-modes must include --burst-mode ({args.burst_mode})")
    if args.channel_burst > POOL:
        parser.error(f"--channel-burst: the default pool of 2048 channels holds {POOL} domains")
    with LocalCluster(nodes_specs=[], keep_run_dir=False) as cluster:
        cluster.kubectl("apply", "-f", str(CRDS))
        cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
        cluster.create_namespace(NAMESPACE)
        cluster.create_namespace(DRIVER_NAMESPACE)
        results = asyncio.run(run_all(cluster, args))
    RESULTS.mkdir(parents=True, exist_ok=True)
    write_controller_plot(
        results,
        RESULTS / "controller_bench.png",
        target_p50_ms=TARGET_P50_MS,
        target_burst_s=TARGET_BURST_S,
    )
    (RESULTS / "controller_bench.json").write_text(json.dumps(results, indent=2))
    short = printable(results)
    if "ratios_ours_over_other" in results:
        short["other_controller"] = printable(results["other_controller"])
    print(json.dumps(short, indent=2))
    channels = results.get("burst_channel_isolation", {}).get("channels")
    if channels is not None and not channels["unique"]:
        raise SystemExit(f"channel isolation: not every domain got a channel of its own: {channels}")


if __name__ == "__main__":
    main()
