"""Gate ComputeDomainBindingConditions off vs on, in one run on one rack: the seed MPIJob (a benchmark).

What one run measures (issue 42 item 2, docs/binding-conditions.md): a driver-managed rack of N trays
(real control plane and kubelets on fakecri, the chart's controller and plugins as pods, the real MPI
Operator, each node's IMEX daemon a real ``compute-domain-daemon`` supervising the fake nvidia-imex);
the seed's ComputeDomain and MPIJob with N workers, submitted with the gate off, then (``helm upgrade``)
with it on, then off and on again for ``--rounds`` rounds. Per job:

- ``job_start_s``: submit → every worker Running;
- ``bound_before_daemon_ready``: workers whose ``PodScheduled`` came before their node's daemon pod
  was Ready (second resolution, as the API keeps condition times);
- ``waiting_after_bound_s``: per worker, ``PodScheduled`` → ``Ready`` (p50, max): the time a bound pod
  sits in ContainerCreating, mostly waiting for its channel's prepare;
- ``failed_prepare_events``: ``FailedPrepareDynamicResources`` Events of the job's namespace;
- ``prepare_calls``: the kubelets' NodePrepareResources calls to our driver (their
  ``dra_grpc_operations_duration_seconds`` counts), summed over the nodes.

Run: ``.venv/bin/python bench/binding_bench.py [--nodes 18] [--rounds 2]`` after ``make bench``.
Output: JSON in ``bench/results/binding_bench.json``, plot ``bench/results/binding_bench.png``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import functools
import json
import os
import statistics
import time
from typing import Any

from benchlib import (
    RESULTS,
    kubectl_apply,
)

from imexdra.api.constants import DRIVER_NAME
from imexdra_sim import demo, rack, seedworkloads
from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.promtext import parse_metrics
from imexdra_sim.waiting import poll

GATE = "ComputeDomainBindingConditions"
WORKERS = "training.kubeflow.org/job-role=worker"
PREPARE = "dra_grpc_operations_duration_seconds_count"


def _json(cluster: LocalCluster, *args: str) -> Any:
    return json.loads(cluster.kubectl("get", *args, "-o", "json", timeout=60).stdout)


def _time(obj: dict[str, Any], kind: str) -> dt.datetime | None:
    for condition in obj["status"].get("conditions", []):
        if condition["type"] == kind and condition["status"] == "True":
            return dt.datetime.fromisoformat(condition["lastTransitionTime"].replace("Z", "+00:00"))
    return None


def _prepare_calls(cluster: LocalCluster) -> float:
    """NodePrepareResources calls of every kubelet to our driver so far."""
    calls = 0.0
    for node in cluster.nodes:
        text = cluster.kubectl("get", "--raw", f"/api/v1/nodes/{node.name}/proxy/metrics", timeout=60).stdout
        samples = parse_metrics(text)
        calls += sum(
            value
            for (name, labels), value in samples.items()
            if name == PREPARE
            and ("driver_name", DRIVER_NAME) in labels
            and any(key == "method_name" and "NodePrepareResources" in v for key, v in labels)
        )
    return calls


def run_job(cluster: LocalCluster, workers: int, gate: bool) -> dict[str, Any]:
    """One seed job with the gate ``gate``: its figures, then the job and domain deleted."""
    namespace = demo.WORKLOAD_NAMESPACE
    cluster.create_namespace(namespace)
    before = _prepare_calls(cluster)
    seed = seedworkloads.mpijob(namespace, workers=workers)
    started = time.monotonic()
    kubectl_apply(cluster, *seed)

    def running() -> list[dict[str, Any]] | None:
        pods = _json(cluster, "pods", "-n", namespace, "-l", WORKERS)["items"]
        ready = [p for p in pods if p["status"].get("phase") == "Running" and _time(p, "Ready")]
        return ready if len(ready) == workers else None

    pods = poll(f"{workers} workers Running", running, within=300 + 10 * workers, interval=0.5)
    job_start = time.monotonic() - started
    uid = _json(cluster, "computedomain", demo.DOMAIN, "-n", namespace)["metadata"]["uid"]
    daemons = _json(
        cluster, "pods", "-n", rack.DRIVER_NAMESPACE, "-l", f"resource.nvidia.com/computeDomain={uid}"
    )
    daemon_ready = {d["spec"]["nodeName"]: _time(d, "Ready") for d in daemons["items"]}
    early, waiting = 0, []
    for pod in pods:
        bound, ready = _time(pod, "PodScheduled"), _time(pod, "Ready")
        assert bound is not None and ready is not None
        node_ready = daemon_ready.get(pod["spec"]["nodeName"])
        early += int(node_ready is None or bound < node_ready)
        waiting.append((ready - bound).total_seconds())
    events = _json(cluster, "events", "-n", namespace)["items"]
    result = {
        "gate": gate,
        "workers": workers,
        "job_start_s": round(job_start, 2),
        "bound_before_daemon_ready": early,
        "waiting_after_bound_s": {
            "p50": statistics.median(waiting),
            "max": max(waiting),
            "all": sorted(waiting),
        },
        "failed_prepare_events": sum(
            e.get("count", 1) for e in events if e.get("reason") == "FailedPrepareDynamicResources"
        ),
        "prepare_calls": _prepare_calls(cluster) - before,
    }
    cluster.kubectl("delete", "mpijob", demo.JOB, "-n", namespace, "--wait=true", timeout=180)
    cluster.kubectl("delete", "namespace", namespace, "--wait=true", timeout=300)
    poll(
        "no node labelled for a domain",
        lambda: not _json(cluster, "nodes", "-l", "resource.nvidia.com/computeDomain")["items"],
        within=180,
        interval=0.5,
    )
    return result


def write_plot(results: dict[str, Any], path: os.PathLike[str]) -> None:
    """Job start, bound-too-early workers, bound → Ready and prepare calls, gate off vs on, per job.

    Every job is a point; equal values overlap.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 4, figsize=(16, 4))
    metrics: tuple[tuple[Any, str], ...] = (
        (lambda job: job["job_start_s"], "job start (s)"),
        (lambda job: job["bound_before_daemon_ready"], "workers bound before their daemon was Ready"),
        (lambda job: job["waiting_after_bound_s"]["p50"], "worker bound → Ready, p50 (s)"),
        (lambda job: job["prepare_calls"], "NodePrepareResources calls (workers' + daemons')"),
    )
    for axis, (value_of, title) in zip(axes, metrics, strict=True):
        for offset, gate, colour in ((0, False, "tab:gray"), (1, True, "tab:green")):
            values = [value_of(job) for job in results["jobs"] if job["gate"] is gate]
            axis.scatter(
                [offset] * len(values), values, color=colour, label=f"gate {'on' if gate else 'off'}"
            )
        axis.set_xticks([0, 1], ["gate off", "gate on"])
        axis.set_title(title, fontsize=9)
        axis.set_ylim(bottom=0)
    axes[0].legend(fontsize=8)
    figure.suptitle(f"ComputeDomainBindingConditions, seed MPIJob on {results['nodes']} trays, one run")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=seedworkloads.RACK_WORKERS, help="trays (= workers)")
    parser.add_argument("--rounds", type=int, default=2, help="gate off, then on, this many times")
    args = parser.parse_args()
    config = rack.RackConfig(nodes=args.nodes)
    cluster = rack.new_rack_cluster(config)
    jobs = []
    try:
        rack.bring_up(cluster, config)
        for _ in range(args.rounds):
            for gate in (False, True):
                rack.upgrade_chart(cluster, {"featureGates": {GATE: gate}})
                # A plugin restarted by the upgrade republishes its slice a moment after helm returns.
                poll(
                    "the slices following the gate",
                    functools.partial(rack.slices_follow_gate, cluster, gate),
                    within=180,
                    interval=0.5,
                )
                jobs.append(run_job(cluster, args.nodes, gate))
                print(json.dumps(jobs[-1]), flush=True)
    finally:
        cluster.stop()
    results = {
        "nodes": args.nodes,
        "rounds": args.rounds,
        "load_average_at_end": os.getloadavg(),
        "jobs": jobs,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "binding_bench.json").write_text(json.dumps(results, indent=1))
    write_plot(results, RESULTS / "binding_bench.png")


if __name__ == "__main__":
    main()
