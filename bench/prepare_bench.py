"""NodePrepareResources latency of the kubelet plugin over its real gRPC socket (a benchmark, not a test).

Setup: a real local control plane (no kubelet: the bench calls the DRA socket itself, as the kubelet
would), the CRDs, a Node object, a ComputeDomain whose daemon on that node is recorded Ready (clique
and status, as the controller writes them), and N allocated ResourceClaims — the plugin GETs each one,
as upstream's library does. The plugin runs as the real ``compute-domain-kubelet-plugin`` process on
a simulated node (fake NVML, fake ``/proc/devices``), driver-managed, with upstream's default client
rate limit (5 QPS, burst 10).

Each cycle prepares one claim (channel 0 on the node, so only one can be prepared at a time) and
unprepares it. A prepare costs two API requests (GET claim, label the node: an Update from the
node the plugin last wrote, once its watch confirms that copy, else GET + Update) and an unprepare
one (unlabel), so cycles are paced to stay within the client rate limit; otherwise the numbers would
measure the throttle rather than the plugin. The requests the apiserver actually served per cycle
are counted and reported (``api_requests_per_cycle``). Reported: prepare (and unprepare) latency
percentiles against the targets p50 <= 5 ms and p99 <= 50 ms, the plugin's peak RSS, as JSON on
stdout and in ``bench/results/prepare_bench.json``, with a plot in ``bench/results/prepare_bench.png``.
``--profile`` records the plugin with py-spy during the cycles and adds the hottest functions.

The API floor: after the plugin has stopped, the bench itself makes the same requests a prepare
makes — GET the claim, then an Update of the node that adds the label (and, outside the timing, the
Update that removes it) — through the same lean transport (``common.kube.transport``) and pacing, for up
to 300 claims. Its p50
next to the prepare p50 says how much of a prepare is the API server's round trips and how much is
the plugin's own work (checkpoint, CDI spec, gRPC, locking), reported as ``plugin_own_p50_ms``.
Each cycle ends with a NodePrepareResources call without claims, which the plugin answers at once:
the gRPC floor (``grpc_floor_ms``: this bench's Python client, the socket and the plugin's gRPC
server, both awake; the kubelet's client is Go), and ``plugin_own_beyond_grpc_p50_ms`` leaves it out
too.
``--step-timing`` runs the plugin through ``steptiming.py``, which times the steps of each prepare
from inside (claim GET, checkpoint writes, label Update, CDI spec, the rest): ``plugin_steps_p50_ms``.

Channel isolation (``prepare_isolation``): the same cycles with the plugin host-managed (and its host
IMEX), under domain and under channel isolation, ``--isolation-claims`` claims each, and under channel
isolation again with ``--held-claims`` claims of other domains held prepared on the node; plus the
channel check's parts timed in-process (checkpoint scans, domain lookup). ``--isolation-claims 0``
skips it.

Run: ``.venv/bin/python bench/prepare_bench.py [--claims 1000] [--state-dir /dev/shm]`` after
``make bench`` (or ``make k8s`` and ``.venv/bin/pip install -e '.[bench]'``); ``--state-dir`` moves
the node's plugin directory and CDI root off the disk, which shows how much of the latency is the
disk's (the checkpoint and CDI files are replaced by rename).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
import msgspec
import steptiming
from benchlib import (
    CLIQUE,
    DRIVER,
    DRIVER_NAMESPACE,
    PLUGIN_BIN,
    RESULTS,
    RUNTIME_BIN,
    DraStub,
    Profiler,
    cpu_seconds,
    install_crds,
    kubectl_apply,
    peak_rss_mib,
    simulated_node,
    wait_for_socket,
)
from plotting import write_prepare_plot
from prepare_isolation import allocate_claims, isolation_phase
from stats import percentile

from imexdra.api.constants import NODE_LABEL_KEY
from imexdra.common.kube.connection import connect
from imexdra.dra._pb import dra_v1_pb2 as dra
from imexdra_sim.builders import compute_domain
from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.promtext import Samples, apiserver_metrics

NODE = "bench-node"
NAMESPACE = "bench"
TARGET_P50_MS = 5.0
TARGET_P99_MS = 50.0
API_CALLS_PER_CYCLE = 3
HOST_API_CALLS_PER_CYCLE = 1
API_FLOOR_CLAIMS = 300


def setup_domain(cluster: LocalCluster) -> str:
    """CRDs, Node, namespaces, a ComputeDomain recorded Ready on the node; returns the domain UID."""
    install_crds(cluster)
    kubectl_apply(
        cluster,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": NODE, "labels": {"kubernetes.io/hostname": NODE}},
        },
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": DRIVER_NAMESPACE}},
        compute_domain("bench", NAMESPACE, num_nodes=1),
    )
    uid = cluster.kubectl(
        "get", "computedomain", "bench", "-n", NAMESPACE, "-o", "jsonpath={.metadata.uid}"
    ).stdout
    entry = {"ipAddress": "127.100.1.2", "cliqueID": CLIQUE, "index": 0, "status": "Ready"}
    kubectl_apply(
        cluster,
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomainClique",
            "metadata": {"name": f"{uid}.{CLIQUE}", "namespace": DRIVER_NAMESPACE},
            "daemons": [{"nodeName": NODE, **entry}],
        },
    )
    status = {"status": {"status": "Ready", "nodes": [{"name": NODE, **entry}]}}
    cluster.kubectl(
        "patch",
        "computedomain",
        "bench",
        "-n",
        NAMESPACE,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(status),
    )
    return uid


async def cycle_claims(
    socket: Path, claims: list[tuple[str, str]], interval: float
) -> tuple[list[float], list[float], list[float]]:
    """Prepare then unprepare each claim, paced at ``interval`` seconds per cycle; latencies in ms.

    Each cycle ends with a NodePrepareResources call without claims, which the plugin answers at once:
    the gRPC floor (this client, the socket, the plugin's gRPC server), the third list. It comes last
    so that the prepare still meets both processes idle, as the kubelet's calls do; a call right after
    the unprepare finds them awake (docs: bench/README.md, "Prepare ... where a prepare's time goes").
    """
    prepare_ms: list[float] = []
    unprepare_ms: list[float] = []
    grpc_ms: list[float] = []
    async with grpc.aio.insecure_channel(f"unix://{socket}") as channel:
        stub = DraStub(channel)
        for name, uid in claims:
            started = time.monotonic()
            request = [dra.Claim(namespace=NAMESPACE, name=name, uid=uid)]
            t0 = time.perf_counter()
            prepared = await stub.NodePrepareResources(
                dra.NodePrepareResourcesRequest(claims=request), timeout=60
            )
            prepare_ms.append((time.perf_counter() - t0) * 1e3)
            result = prepared.claims[uid]
            if result.error or list(result.devices[0].cdi_device_ids) != [
                f"k8s.compute-domain.nvidia.com/claim={uid}-channel-0"
            ]:
                raise RuntimeError(f"unexpected prepare result for {name}: {result}")
            t0 = time.perf_counter()
            unprepared = await stub.NodeUnprepareResources(
                dra.NodeUnprepareResourcesRequest(claims=request), timeout=60
            )
            unprepare_ms.append((time.perf_counter() - t0) * 1e3)
            if unprepared.claims[uid].error:
                raise RuntimeError(f"unexpected unprepare result for {name}: {unprepared.claims[uid].error}")
            t0 = time.perf_counter()
            await stub.NodePrepareResources(dra.NodePrepareResourcesRequest(claims=[]), timeout=60)
            grpc_ms.append((time.perf_counter() - t0) * 1e3)
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))
    return prepare_ms, unprepare_ms, grpc_ms


async def api_floor(
    cluster: LocalCluster, claims: list[tuple[str, str]], domain_uid: str, interval: float
) -> list[float]:
    """The time of a prepare's two requests (GET claim, label the node) alone; ms per claim."""
    transport = connect(cluster.kubeconfig).transport(user_agent="prepare-bench")
    label = NODE_LABEL_KEY
    node_path = f"/api/v1/nodes/{NODE}"
    node = msgspec.json.decode((await transport.request("GET", node_path)).body)
    floor_ms: list[float] = []
    try:
        for name, _uid in claims[:API_FLOOR_CLAIMS]:
            started = time.monotonic()
            node["metadata"].setdefault("labels", {})[label] = domain_uid
            t0 = time.perf_counter()
            claim_path = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims/{name}"
            msgspec.json.decode((await transport.request("GET", claim_path)).body)
            node = msgspec.json.decode((await transport.request("PUT", node_path, body=node)).body)
            floor_ms.append((time.perf_counter() - t0) * 1e3)
            del node["metadata"]["labels"][label]
            node = msgspec.json.decode((await transport.request("PUT", node_path, body=node)).body)
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))
    finally:
        transport.close()
    return floor_ms


def requests_per_cycle(before: Samples, after: Samples, cycles: int) -> dict[str, float]:
    """The plugin's API requests per prepare+unprepare cycle, by verb and resource (watches left out)."""
    counts: dict[str, float] = {}
    for (name, labels), value in after.items():
        fields = dict(labels)
        if name != "apiserver_request_total" or fields.get("verb") in ("WATCH", "CONNECT"):
            continue
        if fields.get("resource") not in ("nodes", "resourceclaims"):
            continue
        key = f"{fields['verb']} {fields['resource']}"
        counts[key] = counts.get(key, 0.0) + value - before.get((name, labels), 0.0)
    return {key: round(n / cycles, 2) for key, n in sorted(counts.items()) if n > 0}


def summary(
    prepare_ms: list[float],
    unprepare_ms: list[float],
    floor_ms: list[float],
    grpc_ms: list[float],
    rss: float,
    args: argparse.Namespace,
) -> dict[str, Any]:
    p50, p99 = percentile(prepare_ms, 0.50), percentile(prepare_ms, 0.99)
    floor_p50 = percentile(floor_ms, 0.50)
    grpc_p50 = percentile(grpc_ms, 0.50)
    return {
        "benchmark": "prepare_bench",
        "claims": len(prepare_ms),
        "prepare_ms": {
            "p50": round(p50, 2),
            "p90": round(percentile(prepare_ms, 0.90), 2),
            "p99": round(p99, 2),
            "max": round(max(prepare_ms), 2),
            "mean": round(statistics.fmean(prepare_ms), 2),
        },
        "unprepare_ms": {
            "p50": round(percentile(unprepare_ms, 0.5), 2),
            "p99": round(percentile(unprepare_ms, 0.99), 2),
        },
        "api_floor_ms": {"p50": round(floor_p50, 2), "p99": round(percentile(floor_ms, 0.99), 2)},
        "plugin_own_p50_ms": round(p50 - floor_p50, 2),
        "grpc_floor_ms": {"p50": round(grpc_p50, 2), "p99": round(percentile(grpc_ms, 0.99), 2)},
        "plugin_own_beyond_grpc_p50_ms": round(p50 - floor_p50 - grpc_p50, 2),
        "plugin_steps_p50_ms": args.steps,
        "targets_ms": {"p50": TARGET_P50_MS, "p99": TARGET_P99_MS},
        "meets_targets": p50 <= TARGET_P50_MS and p99 <= TARGET_P99_MS,
        "plugin_peak_rss_mib": round(rss, 1),
        "plugin_cpu_ms_per_cycle": round(args.cpu_ms_per_cycle, 2),
        "api_requests_per_cycle": args.requests_per_cycle,
        "plugin_profile": args.profile_summary,
        "kube_api_qps": args.kube_api_qps,
        "cycle_interval_s": round(args.interval, 3),
        "state_dir": args.state_dir,
        "load_average": os.getloadavg(),
    }


def without_samples(value: Any) -> Any:
    """``value`` without its per-claim sample lists (they stay in the JSON file), for stdout."""
    if isinstance(value, dict):
        return {k: without_samples(v) for k, v in value.items() if not k.startswith("prepare_samples")}
    return value


def run(args: argparse.Namespace) -> dict[str, Any]:
    with (
        LocalCluster(nodes_specs=[]) as cluster,
        tempfile.TemporaryDirectory(prefix="kp-bench-", dir=args.state_dir) as tmp,
    ):
        domain_uid = setup_domain(cluster)
        specs = [(domain_uid, 0)] * args.claims  # every claim allocated channel-0 of the node
        claims = asyncio.run(allocate_claims(cluster, NAMESPACE, NODE, specs, prefix="claim"))
        base = Path(tmp)
        env = {**os.environ, **simulated_node(base, NODE), "KUBECONFIG": str(cluster.kubeconfig)}
        env["KUBE_API_QPS"] = str(args.kube_api_qps)
        record = base / "steps.txt"
        argv = [str(PLUGIN_BIN)]
        if args.step_timing:
            argv = [str(RUNTIME_BIN / "python"), str(Path(__file__).with_name("steptiming.py")), str(record)]
        with (base / "plugin.log").open("wb") as log:
            process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            socket = base / "plugins" / DRIVER / "dra.sock"
            wait_for_socket(socket, process)
            time.sleep(2.0)  # let the watches list and the client's token bucket refill before measuring
            cpu_before = cpu_seconds(process.pid)
            requests_before = apiserver_metrics(cluster)
            profile_path = RESULTS / "prepare_bench_profile.txt"
            profiler = Profiler(process.pid, profile_path, rate=1000) if args.profile else None
            if profiler is not None:
                profiler.start()
            prepare_ms, unprepare_ms, grpc_ms = asyncio.run(cycle_claims(socket, claims, args.interval))
            args.profile_summary = profiler.stop() if profiler is not None else None
            args.requests_per_cycle = requests_per_cycle(
                requests_before, apiserver_metrics(cluster), len(claims)
            )
            args.cpu_ms_per_cycle = (cpu_seconds(process.pid) - cpu_before) / len(claims) * 1e3
            rss = peak_rss_mib(process.pid)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)
        args.steps = steptiming.steps(record) if args.step_timing else None
        floor_ms = asyncio.run(api_floor(cluster, claims, domain_uid, args.interval))
        isolation = (
            asyncio.run(isolation_phase(cluster, base, NODE, NAMESPACE, args))
            if args.isolation_claims
            else None
        )
    result = summary(prepare_ms, unprepare_ms, floor_ms, grpc_ms, rss, args)
    RESULTS.mkdir(parents=True, exist_ok=True)
    samples = {
        **result,
        "prepare_samples_ms": prepare_ms,
        "api_floor_samples_ms": floor_ms,
        "grpc_floor_samples_ms": grpc_ms,
    }
    if isolation is not None:
        samples["host_managed_isolation"] = isolation
        result["host_managed_isolation"] = without_samples(isolation)
    (RESULTS / "prepare_bench.json").write_text(json.dumps(samples, indent=1))
    write_prepare_plot(samples, RESULTS / "prepare_bench.png")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=1000, help="claims to prepare (>= 1000 for the target)")
    parser.add_argument(
        "--kube-api-qps", type=float, default=5.0, help="the plugin's client QPS (upstream: 5)"
    )
    parser.add_argument(
        "--state-dir",
        default="/tmp",
        help="where the node's kubelet dirs and CDI root live (default /tmp: disk, like /var/lib/kubelet)",
    )
    parser.add_argument(
        "--isolation-claims",
        type=int,
        default=200,
        help="claims per isolation in the host-managed channel/domain isolation comparison (0: skip it)",
    )
    parser.add_argument(
        "--held-claims",
        type=int,
        default=100,
        help="claims of other domains (each its own channel) held prepared on the node, channel isolation",
    )
    parser.add_argument(
        "--step-timing",
        action="store_true",
        help="time each prepare's steps inside the plugin (steptiming.py; results: plugin_steps_p50_ms)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="record the plugin with py-spy at 1000 Hz while it prepares (summary in the results)",
    )
    args = parser.parse_args()
    # Pace cycles so the plugin's API requests stay within its client rate limit (see the docstring).
    args.interval = API_CALLS_PER_CYCLE / args.kube_api_qps * 1.1
    # Host-managed, a cycle makes one request (GET the claim): no node label to add or remove.
    args.host_interval = HOST_API_CALLS_PER_CYCLE / args.kube_api_qps * 1.1
    print(json.dumps(run(args), indent=1))


if __name__ == "__main__":
    main()
