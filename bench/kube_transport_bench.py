"""The API transport, ours vs aiohttp: CPU per request, RSS and connections (a benchmark).

Why (docs/kube-client.md): the one kube client needs one transport; the choice is between our lean
HTTP/1.1 transport (``common.kube.transport``) and a maintained library. Each contender runs in a fresh
process of its own against the same real kube-apiserver (the local control plane, no nodes), sends
``--requests`` GETs of one ConfigMap over TLS with a bearer token, ``--concurrency`` at a time with at
most 16 connections (the lean transport's bound), and reports:

- ``cpu_ms_per_request``: the process' CPU time (user + system) over the requests, per request;
- ``rss_mib``: resident memory after the run, and its growth over the run;
- ``connections``: TCP sockets the process holds to the API server at the end;
- ``wall_s``: elapsed time of the requests.

aiohttp is not a dependency of the driver: install it into the venv to run this (``pip install
aiohttp==3.14.3``). Run: ``.venv/bin/python bench/kube_transport_bench.py [--requests 3000]``.
Output: JSON in ``bench/results/kube_transport_bench.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from imexdra.common.kube.connection import connect
from imexdra_sim.localcluster.cluster import LocalCluster

#: Not benchlib's: importing it builds the runtime venv in the shared cache, which this bench does not use.
RESULTS = Path(__file__).resolve().parent / "results"
PATH = "/api/v1/namespaces/default/configmaps/bench"
CONTENDERS = ("lean", "aiohttp")


def _rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _sockets() -> int:
    links = (str(fd.readlink()) for fd in Path("/proc/self/fd").iterdir() if fd.is_symlink())
    inodes = {link[8:-1] for link in links if link.startswith("socket:[")}
    established = 0
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            if fields[3] == "01" and fields[9] in inodes:  # ESTABLISHED, one of ours
                established += 1
    return established


async def _lean(kubeconfig: Path, requests: int, concurrency: int) -> None:
    transport = connect(kubeconfig).transport(user_agent="transport-bench")
    limit = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with limit:
            await transport.request("GET", PATH)

    await asyncio.gather(*(one() for _ in range(requests)))
    _CHILD["connections"] = _sockets()  # before the pool is closed
    transport.close()


async def _aiohttp(kubeconfig: Path, requests: int, concurrency: int) -> None:
    import aiohttp

    connection = connect(kubeconfig)
    server = connection.config.cluster.server.rstrip("/")
    header = await connection.credentials.header()
    limit = asyncio.Semaphore(concurrency)
    connector = aiohttp.TCPConnector(ssl=connection.tls or False, limit=16)
    async with aiohttp.ClientSession(connector=connector, headers={"Authorization": header or ""}) as session:

        async def one() -> None:
            async with limit, session.get(server + PATH) as response:
                response.raise_for_status()
                await response.read()

        await asyncio.gather(*(one() for _ in range(requests)))
        _CHILD["connections"] = _sockets()  # before the session closes them


_CHILD: dict[str, Any] = {}


def child(contender: str, kubeconfig: Path, requests: int, concurrency: int) -> dict[str, Any]:
    """Run one contender in this process; what it cost."""
    run = _lean if contender == "lean" else _aiohttp
    asyncio.run(run(kubeconfig, 20, 4))  # warm-up: imports, TLS session, first connections
    rss_before = _rss_mib()
    cpu, wall = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()

    async def measured() -> None:
        await run(kubeconfig, requests, concurrency)
        _CHILD.setdefault("connections", _sockets())

    asyncio.run(measured())
    after, elapsed = resource.getrusage(resource.RUSAGE_SELF), time.monotonic() - wall
    used = (after.ru_utime - cpu.ru_utime) + (after.ru_stime - cpu.ru_stime)
    return {
        "cpu_ms_per_request": round(used * 1000 / requests, 3),
        "wall_s": round(elapsed, 2),
        "requests_per_s": round(requests / elapsed, 1),
        "rss_mib": round(_rss_mib(), 1),
        "rss_growth_mib": round(_rss_mib() - rss_before, 1),
        "connections": _CHILD.get("connections", 0),
    }


def main() -> None:
    """Start a control plane, run each contender in a process of its own, write the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2, help="alternating runs of each contender")
    parser.add_argument("--child", choices=CONTENDERS)
    parser.add_argument("--kubeconfig", type=Path)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.kubeconfig, args.requests, args.concurrency)))
        return
    cluster = LocalCluster(nodes_specs=[])
    cluster.start()
    try:
        configmap = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "bench"},
            "data": {"k": "v"},
        }
        cluster.kubectl("apply", "-f", "-", input=json.dumps(configmap))
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in CONTENDERS}
        for _ in range(args.rounds):
            for name in CONTENDERS:
                command = [sys.executable, __file__, "--child", name, "--kubeconfig", str(cluster.kubeconfig)]
                command += ["--requests", str(args.requests), "--concurrency", str(args.concurrency)]
                done = subprocess.run(command, check=False, capture_output=True, text=True)
                if done.returncode:
                    raise RuntimeError(f"{name}: {done.stderr[-2000:]}")
                out = done.stdout
                runs[name].append(json.loads(out.strip().splitlines()[-1]))
    finally:
        cluster.stop()
    best = {name: min(results, key=lambda r: r["cpu_ms_per_request"]) for name, results in runs.items()}
    result = {
        "requests": args.requests,
        "concurrency": args.concurrency,
        "cpus": os.cpu_count(),
        "best_of_rounds": best,
        "runs": runs,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "kube_transport_bench.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
