"""One job start from submit to every claim prepared, its teardown, and a series of them over sizes."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchlib import (
    DRIVER_NAMESPACE,
    OUR_CONTROLLER_COMMAND,
    BenchController,
    Profiler,
)
from jobstart_api import Api, job
from jobstart_fleet import Fleet, install_api, node_mib
from jobstart_watch import (
    JobStart,
    Simulator,
    api_deltas,
    checkpoint_poller,
    component_cpu,
    controller_writes,
    daemon_breakdown,
    stuck,
)
from stats import percentile

from imexdra_sim.builders import compute_domain
from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.promtext import apiserver_metrics

#: kube-controller-manager's client rate limit, its defaults (the local cluster passes no
#: --kube-api-qps/--kube-api-burst). Each of its controllers has its own client and token bucket.
KCM_QPS = 20.0
KCM_BURST = 30
#: The resourceclaim controller's writes per claim: POST the claim, PATCH the pod's
#: status.resourceClaimStatuses.
WRITES_PER_CLAIM = 2


def claim_floor_s(pods: int, *, host_managed: bool) -> float:
    """The shortest job start kube-controller-manager allows: its resourceclaim controller's writes.

    Every worker pod gets a channel claim from its template, and driver-managed every node's IMEX
    daemon pod a daemon claim too; no pod can be scheduled before its claim exists. At ``KCM_QPS`` after
    a burst of ``KCM_BURST``, the last claim cannot exist sooner than this, whatever the driver does.
    """
    claims = pods if host_managed else 2 * pods
    return round(max(0.0, (claims * WRITES_PER_CLAIM - KCM_BURST) / KCM_QPS), 2)


async def job_start(
    cluster: LocalCluster,
    api: Api,
    fleet: Fleet,
    controller: BenchController,
    pods: int,
    namespace: str,
    profile: bool,
    formation_s: float = 0.0,
    daemons_write_cliques: bool = False,
) -> dict[str, Any]:
    """One submit → all prepared, with its API traffic, CPU and memory; cleans up afterwards."""
    await api.post(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    )
    state = JobStart(pods)
    simulator = (
        None
        if fleet.kubelets
        else Simulator(
            api, fleet, namespace, state, formation_s=formation_s, daemons_write_cliques=daemons_write_cliques
        )
    )
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
    watches = await api.watch_all(sources)
    poll = simulator.poll if simulator is not None else checkpoint_poller(fleet, state)
    mode = "host" if fleet.host_managed else "driver"
    profilers: list[tuple[str, Profiler]] = []
    if profile and controller.popen is not None:
        assert cluster.run_dir is not None
        profilers = [
            (
                "controller",
                Profiler(controller.pid, cluster.run_dir / f"profile-controller-{mode}-{pods}.txt"),
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
        "claim_floor_s": claim_floor_s(pods, host_managed=fleet.host_managed),
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
    while await api.exists(f"/api/v1/namespaces/{namespace}"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"namespace {namespace} not gone")
        await asyncio.sleep(0.5)


# -- series ---------------------------------------------------------------------------------------


def memory_fits(count: int, *, host_managed: bool) -> bool:
    available_kib = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemAvailable:")
    )
    return count * node_mib(host_managed=host_managed) * 1024 < available_kib - 2 * 1024 * 1024


async def series(
    cluster: LocalCluster,
    sizes: list[int],
    args: argparse.Namespace,
    *,
    kubelets: bool,
    host_managed: bool = True,
    binding_conditions: bool = False,
) -> list[dict[str, Any]]:
    """Job starts for each size on one cluster, growing the fleet; per size ours, then the other."""
    assert cluster.run_dir is not None
    install_api(cluster)
    api = Api(cluster)
    runs = []
    commands = [("ours", OUR_CONTROLLER_COMMAND)]
    if args.controller_command and not binding_conditions:  # our gate: our controller only
        commands.append(("other", args.controller_command))
    with tempfile.TemporaryDirectory(prefix="jsb-", dir=args.state_dir) as tmp:
        fleet = Fleet(
            cluster,
            Path(tmp),
            kubelets=kubelets,
            host_managed=host_managed,
            binding_conditions=binding_conditions,
        )
        name = series_name(
            kubelets=kubelets, host_managed=host_managed, binding_conditions=binding_conditions
        )
        try:
            for size in sizes:
                if not memory_fits(size - len(fleet.nodes), host_managed=host_managed):
                    runs.append(
                        {"nodes": size, "skipped": "the plugins would not fit in the available memory"}
                    )
                    continue
                grow_s = await fleet.grow(api, size)
                per_size: dict[str, Any] = {"nodes": size, "series": name}
                per_size["fleet_growth_s"] = round(grow_s, 1)
                for label, command in commands:
                    controller = BenchController(
                        cluster.kubeconfig,
                        cluster.run_dir / f"controller-{label}.log",
                        host_managed=host_managed,
                        qps=args.controller_qps,
                        burst=args.controller_burst,
                        command=command,
                        binding_conditions=binding_conditions,
                    )
                    controller.start()
                    try:
                        await controller.wait_ready()
                        await asyncio.sleep(1)  # caches synced; the apiserver quiet again
                        profile = label == "ours" and size in args.profile_nodes and not kubelets
                        mode = ("d" if not host_managed else "") + ("b" if binding_conditions else "")
                        namespace = f"job-{name[0]}{mode}{size}-{label}"
                        per_size[label] = await job_start(
                            cluster,
                            api,
                            fleet,
                            controller,
                            size,
                            namespace,
                            profile,
                            args.imex_formation_seconds,
                            daemons_write_cliques=label == "other" and args.other_daemons == "upstream",
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


def series_name(*, kubelets: bool, host_managed: bool, binding_conditions: bool = False) -> str:
    """``kubelets`` and ``simulated`` are host-managed (their names predate the driver-managed series)."""
    if kubelets:
        return "kubelets"
    if host_managed:
        return "simulated"
    return "simulated_driver_managed_binding" if binding_conditions else "simulated_driver_managed"


SERIES = ("kubelets", "simulated", "simulated_driver_managed", "simulated_driver_managed_binding")


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
    copy: dict[str, Any] = json.loads(json.dumps(run))
    for label in ("ours", "other"):
        if label in copy:
            copy[label].pop("prepared_curve_s", None)
            copy[label]["api"].pop("by_verb_and_resource", None)
    return copy
