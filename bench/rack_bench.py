"""Controller scale from 1 to 16 racks: driver-managed domains of 18 nodes, no plugins (a benchmark).

What one run measures (issue 21 item 4): ``R`` racks of 72 nodes (an NVL72-class rack is 18 trays;
four 18-node domains per rack here, so 16 racks are 1152 nodes and 64 domains). The clock starts when a
user's tooling creates the ``4R`` ComputeDomains (``numNodes: 18``) and labels each domain's 18 nodes
with its UID, as the kubelet plugin does when a worker's channel claim is prepared there; it stops
when every node is published Ready in its domain's ComputeDomainClique and every domain is Ready.

Real: the ``compute-domain-controller`` process (the chart's client rate limit, ``controller.kubeAPI``,
unless ``--controller-qps/--controller-burst``; the committed 1 → 16 sweep ran at 5 QPS / burst 10),
kube-apiserver and etcd, kube-controller-manager's DaemonSet controller (one daemon pod per labelled
node) and resourceclaim controller (each daemon pod's claim from the daemon template), kube-scheduler
(allocates the node's daemon device through DRA and binds). Simulated, lightly: each node is a Node
object with a Lease (``jobstart_fleet.Fleet`` without plugins: its daemon ResourceSlice is published for
it, as its plugin would) and its daemon pod's kubelet, runtime and daemon are
``daemonsim.DaemonKubelet`` without plugins (Running with an IP, the clique label set by the real
daemon's code, Ready at the startup probe's tick once the controller has listed the node). No plugin
processes and no IMEX run. Leases are renewed every 20 s, not a kubelet's 10 s: 1152 kubelets' renewals
would be 115 writes/s on this 2-core machine, a load a real control plane spreads over its own cores. A
node added as the fleet grows waits up to two periods for its first renewal, still inside the node
lifecycle's 50 s grace; the run records the longest gap.

Reported per size: time until every clique is published and every domain Ready, per-stage first/all
and per-node steps (where the time goes), kube-controller-manager's floor (its resourceclaim
controller's two writes per daemon claim at 20 QPS after a burst of 30: no daemon can be scheduled
before its claim exists), the apiserver's requests by verb and resource with 409s and 429s, the
controller's own writes by resource, CPU seconds per component (and the bench's own, which plays 72R
kubelets), the controller's RSS; growth factors from the smallest to the largest size. The controller
is restarted for each size, so its CPU and peak RSS are that size's.

Run: ``.venv/bin/python bench/rack_bench.py [--racks 1,2,4,8,16]`` after ``make bench``. Output: JSON on
stdout and in ``bench/results/rack_bench.json``, plot in ``bench/results/rack_bench.png``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import signal
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchlib import (
    DRIVER_NAMESPACE,
    RESULTS,
    BenchController,
    add_controller_rate_args,
    gathered,
)
from daemonsim import DAEMON_STAGES, DaemonKubelet
from jobstart_api import Api
from jobstart_fleet import RACK, Fleet, install_api, rack_clique
from jobstart_run import KCM_BURST, KCM_QPS, WRITES_PER_CLAIM
from jobstart_watch import api_deltas, component_cpu, controller_writes, stage_spans, step_lags
from plotting import write_rack_plot

from imexdra.api.constants import NODE_LABEL_KEY
from imexdra_sim.builders import compute_domain
from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.promtext import apiserver_metrics

NODES_PER_RACK = 72
DOMAINS_PER_RACK = NODES_PER_RACK // RACK
DEFAULT_RACKS = (1, 2, 4, 8, 16)
LEASE_RENEW_S = 20.0
CD_PATH = "/apis/resource.nvidia.com/v1beta1/namespaces/{namespace}/computedomains"


def claim_floor_s(daemons: int) -> float:
    """kube-controller-manager's floor: the last daemon claim cannot exist sooner (``jobstart_run``)."""
    return round(max(0.0, (daemons * WRITES_PER_CLAIM - KCM_BURST) / KCM_QPS), 2)


@dataclass
class Domains:
    """When each domain was first seen Ready, as seconds since the clock started."""

    expected: int
    t0: float = 0.0
    ready: dict[str, float] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def on_domain(self, kind: str, obj: dict[str, Any]) -> None:
        if kind != "DELETED" and (obj.get("status") or {}).get("status") == "Ready":
            self.ready.setdefault(obj["metadata"]["name"], self.now())
            self.changed.set()


async def rack_start(
    cluster: LocalCluster, api: Api, fleet: Fleet, controller: BenchController, racks: int
) -> dict[str, Any]:
    """One start of ``4 × racks`` domains on ``72 × racks`` nodes until every clique is published."""
    count = racks * NODES_PER_RACK
    grow_s = await fleet.grow(api, count)
    nodes = [f"node-{i}" for i in range(count)]
    namespace = f"racks-{racks}"
    await api.post(
        "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
    )
    domains = Domains(racks * DOMAINS_PER_RACK)
    daemons = DaemonKubelet(
        api.client,
        stubs=None,
        clique_of=lambda node: rack_clique(int(node.removeprefix("node-"))),
        clock=domains.now,
        changed=domains.changed,
    )
    driver_ns = f"/namespaces/{DRIVER_NAMESPACE}"
    sources = [
        (CD_PATH.format(namespace=namespace), domains.on_domain),
        (f"/api/v1{driver_ns}/pods", daemons.on_pod),
        (f"/apis/resource.k8s.io/v1{driver_ns}/resourceclaims", daemons.on_claim),
        (f"/apis/resource.nvidia.com/v1beta1{driver_ns}/computedomaincliques", daemons.on_clique),
    ]
    watches = await api.watch_all(sources)
    before, writes_before = apiserver_metrics(cluster), controller.metrics()
    cpu_before = {**component_cpu(cluster), "controller": controller.cpu_seconds(), "bench": _own_cpu()}
    restarts_before = api.watch_restarts
    domains.t0 = time.monotonic()
    names = [f"rack-{racks}-{d}" for d in range(domains.expected)]
    created = await gathered(
        [
            api.post(CD_PATH.format(namespace=namespace), compute_domain(name, num_nodes=RACK))
            for name in names
        ]
    )
    created_s = domains.now()
    uids = [obj["metadata"]["uid"] for obj in created]
    await gathered(
        [
            api.patch(f"/api/v1/nodes/{node}", {"metadata": {"labels": {NODE_LABEL_KEY: uids[i // RACK]}}})
            for i, node in enumerate(nodes)
        ]
    )
    labelled_s = domains.now()
    published = daemons.times["published_ready"]
    deadline = time.monotonic() + 120 + count
    while len(published) < count or len(domains.ready) < domains.expected:
        domains.changed.clear()
        daemons.poll()
        if daemons.errors:
            raise RuntimeError(f"daemon stand-in failed: {daemons.errors[0]}")
        if time.monotonic() > deadline:
            reached = {stage: len(t) for stage, t in daemons.times.items()}
            raise TimeoutError(f"{racks} racks: not all published: {reached}, {len(domains.ready)} Ready")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(domains.changed.wait(), timeout=0.1)
    total_s = domains.now()
    after, writes_after = apiserver_metrics(cluster), controller.metrics()
    cpu_after = {**component_cpu(cluster), "controller": controller.cpu_seconds(), "bench": _own_cpu()}
    stages = [stage for stage in DAEMON_STAGES if daemons.times[stage]]
    result = {
        "racks": racks,
        "nodes": count,
        "domains": domains.expected,
        "all_published_s": round(total_s, 2),
        "all_domains_ready_s": round(max(domains.ready.values()), 2),
        "claim_floor_s": claim_floor_s(count),
        "user_created_domains_s": round(created_s, 2),
        "user_labelled_nodes_s": round(labelled_s, 2),
        "daemon_stages": stage_spans({s: daemons.times[s] for s in stages}, count),
        "daemon_steps_per_node": step_lags(
            {node: {s: daemons.times[s].get(node) for s in stages} for node in nodes}, stages
        ),
        "api": api_deltas(before, after),
        "controller_writes": controller_writes(writes_before, writes_after),
        "cpu_s": {k: round(cpu_after[k] - cpu_before.get(k, 0.0), 2) for k in cpu_after},
        "controller_rss_mib": controller.rss_mib(),
        "fleet_growth_s": round(grow_s, 1),
        "lease_renew_max_gap_s": round(fleet.renew_max_gap_s, 1),
        "bench_watch_restarts": api.watch_restarts - restarts_before,
        "load_average": os.getloadavg(),
    }
    await teardown(api, namespace)
    for watch in watches:
        watch.cancel()
    await asyncio.gather(*watches, return_exceptions=True)
    return result


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def teardown(api: Api, namespace: str, within: float = 600) -> None:
    """Delete the domains and wait until the controller has removed everything they had.

    The daemon pods terminate with their DaemonSets; once those are gone, the pods are deleted with
    grace period 0, as a kubelet would confirm them.
    """
    await api.delete(CD_PATH.format(namespace=namespace))
    driver_ns = f"/namespaces/{DRIVER_NAMESPACE}"
    leftovers = (
        CD_PATH.format(namespace=namespace),
        f"/apis/apps/v1{driver_ns}/daemonsets",
        f"/api/v1{driver_ns}/pods",
        f"/apis/resource.k8s.io/v1{driver_ns}/resourceclaims",
        f"/apis/resource.nvidia.com/v1beta1{driver_ns}/computedomaincliques",
    )
    deadline = time.monotonic() + within
    while any([(await api.get(path))["items"] for path in leftovers]):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the domains of {namespace} left objects behind")
        # Pods of a DaemonSet still there would only be created again.
        if not (await api.get(f"/apis/apps/v1{driver_ns}/daemonsets"))["items"]:
            await api.delete(f"/api/v1{driver_ns}/pods", gracePeriodSeconds="0")
        await asyncio.sleep(1)
    labelled = await api.get("/api/v1/nodes", labelSelector=NODE_LABEL_KEY)
    if labelled["items"]:
        names = [n["metadata"]["name"] for n in labelled["items"]]
        raise RuntimeError(f"the controller left its node label on {len(names)} nodes, e.g. {names[:3]}")
    await api.delete(f"/api/v1/namespaces/{namespace}")
    while await api.exists(f"/api/v1/namespaces/{namespace}"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"namespace {namespace} not gone")
        await asyncio.sleep(0.5)


def growth(runs: list[dict[str, Any]]) -> dict[str, float] | None:
    """How each figure grew from the smallest to the largest size, against the growth in nodes."""
    done = [run for run in runs if "all_published_s" in run]
    if len(done) < 2:
        return None
    first, last = done[0], done[-1]
    figures: dict[str, Callable[[dict[str, Any]], float]] = {
        "nodes": lambda r: r["nodes"],
        "all_published_s": lambda r: r["all_published_s"],
        "claim_floor_s": lambda r: r["claim_floor_s"],
        "controller_writes": lambda r: r["controller_writes"]["total"],
        "apiserver_requests": lambda r: r["api"]["requests"],
        "controller_cpu_s": lambda r: r["cpu_s"]["controller"],
        "controller_peak_rss_mib": lambda r: r["controller_rss_mib"]["VmHWM"],
    }
    return {k: round(f(last) / f(first), 2) if f(first) else float("nan") for k, f in figures.items()}


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {
        "benchmark": "rack_bench",
        "cpus": os.cpu_count(),
        "load_average_at_start": os.getloadavg(),
        "controller_rate_limit": {"qps": args.controller_qps, "burst": args.controller_burst},
        "nodes_per_rack": NODES_PER_RACK,
        "nodes_per_domain": RACK,
        "lease_renew_s": LEASE_RENEW_S,
        "runs": [],
    }
    with (
        LocalCluster(nodes_specs=[], keep_run_dir=args.keep) as cluster,
        tempfile.TemporaryDirectory(prefix="rack-", dir=args.state_dir) as tmp,
    ):
        assert cluster.run_dir is not None
        install_api(cluster)
        api = Api(cluster)
        fleet = Fleet(
            cluster, Path(tmp), kubelets=False, host_managed=False, plugins=False, lease_renew_s=LEASE_RENEW_S
        )
        try:
            for racks in args.racks:
                controller = BenchController(
                    cluster.kubeconfig,
                    cluster.run_dir / f"controller-{racks}.log",
                    host_managed=False,
                    qps=args.controller_qps,
                    burst=args.controller_burst,
                )
                controller.start()
                try:
                    await controller.wait_ready()
                    run = await rack_start(cluster, api, fleet, controller, racks)
                except TimeoutError as error:
                    results["runs"].append({"racks": racks, "failed": str(error)[:2000]})
                    break
                finally:
                    controller.stop()
                results["runs"].append(run)
                print(json.dumps(short(run)), flush=True)
        finally:
            await fleet.close()
            await api.close()
    results["growth_smallest_to_largest"] = growth(results["runs"])
    results["load_average_at_end"] = os.getloadavg()
    return results


def short(run: dict[str, Any]) -> dict[str, Any]:
    """A run without its long request table (the JSON file keeps it)."""
    copy: dict[str, Any] = json.loads(json.dumps(run))
    copy["api"].pop("by_verb_and_resource", None)
    return copy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--racks",
        type=lambda text: sorted({int(n) for n in text.split(",")}),
        default=list(DEFAULT_RACKS),
        help="sizes in racks of 72 nodes (four 18-node domains each), comma-separated",
    )
    add_controller_rate_args(parser)
    parser.add_argument("--state-dir", default="/tmp", help="where the bench's scratch directory lives")
    parser.add_argument("--keep", action="store_true", help="keep the cluster's run directory (logs)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    results = asyncio.run(main_async(args))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "rack_bench.json").write_text(json.dumps(results, indent=1))
    write_rack_plot(results, RESULTS / "rack_bench.png")
    print(json.dumps({**results, "runs": [short(r) if "api" in r else r for r in results["runs"]]}, indent=1))


if __name__ == "__main__":
    main()
