"""Idle cost of a bare gRPC server on a unix socket, grpcio's ``grpc.aio`` against grpclib (the plugin's).

Each run starts one server process (no code of ours: the library, the generated registration messages,
one ``GetInfo`` handler) and one client process (grpcio, as the kubelet's client is not the server's
library) that calls ``GetInfo`` once and then holds its connection open, as the kubelet holds its
connections to a plugin. After a settle of ``--settle`` seconds the server's CPU is read over a quiet
window of ``--window`` seconds (``schedstat`` of every thread, ns, by thread name), then its VmRSS.
Each library is also run with the client calling a method the server does not have every
``--retry-every`` seconds (``retry`` in the JSON): a 1.36 kubelet, gate ``ResourceHealthStatus`` on by
default, opens ``NodeWatchResources`` on a DRA plugin's socket and retries every 5 s while the plugin
answers UNIMPLEMENTED, as ours and upstream's do. Runs alternate; the JSON has every run and the medians.

    flock /tmp/imexdra-heavy.lock .venv/bin/python bench/grpc_idle.py --runs 3
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

from plugin_processes import on_cpu_by_thread, tree_on_cpu_seconds, tree_rss_mib

ROOT = Path(__file__).resolve().parents[1]
LIBRARIES = ("grpcio", "grpclib")

_GRPCIO_SERVER = """
import asyncio, sys, grpc
from imexdra.dra._pb import pluginregistration_v1_pb2 as reg
async def get_info(request, context):
    return reg.PluginInfo(type="DRAPlugin", name="bench")
async def main():
    server = grpc.aio.server()
    handler = grpc.unary_unary_rpc_method_handler(
        get_info, request_deserializer=reg.InfoRequest.FromString,
        response_serializer=reg.PluginInfo.SerializeToString)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "pluginregistration.Registration", {"GetInfo": handler}),))
    server.add_insecure_port("unix://" + sys.argv[1])
    await server.start()
    print("ready", flush=True)
    await server.wait_for_termination()
asyncio.run(main())
"""

_GRPCLIB_SERVER = """
import asyncio, sys
from grpclib.const import Cardinality, Handler
from grpclib.server import Server
from imexdra.dra._pb import pluginregistration_v1_pb2 as reg
class Registration:
    async def get_info(self, stream):
        await stream.recv_message()
        await stream.send_message(reg.PluginInfo(type="DRAPlugin", name="bench"))
    def __mapping__(self):
        return {"/pluginregistration.Registration/GetInfo": Handler(
            self.get_info, Cardinality.UNARY_UNARY, reg.InfoRequest, reg.PluginInfo)}
async def main():
    server = Server([Registration()])
    await server.start(path=sys.argv[1])
    print("ready", flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""

_CLIENT = """
import asyncio, sys, grpc
from imexdra.dra._pb import pluginregistration_v1_pb2 as reg
WATCH = "/k8s.io.kubelet.pkg.apis.dra.resourcehealth.v1alpha1.DRAResourceHealth/NodeWatchResources"
async def main():
    async with grpc.aio.insecure_channel("unix://" + sys.argv[1]) as channel:
        call = channel.unary_unary("/pluginregistration.Registration/GetInfo",
            request_serializer=reg.InfoRequest.SerializeToString,
            response_deserializer=reg.PluginInfo.FromString)
        info = await call(reg.InfoRequest(), timeout=10)
        assert info.name == "bench", info
        print("called", flush=True)
        every = float(sys.argv[2])
        if not every:
            await asyncio.Event().wait()
        watch = channel.unary_stream(WATCH)
        while True:
            await asyncio.sleep(every)
            try:
                async for _ in watch(b"", timeout=10):
                    pass
            except grpc.aio.AioRpcError as error:
                assert error.code() == grpc.StatusCode.UNIMPLEMENTED, error
            else:
                raise AssertionError("the server has no NodeWatchResources")
asyncio.run(main())
"""


def _started(code: str, socket: Path, expect: str, *args: str) -> subprocess.Popen[str]:
    argv = [sys.executable, "-c", code, str(socket), *args]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    if line != expect:
        process.kill()
        raise RuntimeError(f"expected {expect!r} from the child, got {line!r} (exit {process.poll()})")
    return process


def one_run(library: str, settle: float, window: float, retry_every: float = 0.0) -> dict[str, Any]:
    """Server + connected client (idle, or retrying an unknown method); the server's CPU and RSS."""
    with tempfile.TemporaryDirectory(prefix="grpc-idle", dir="/tmp") as scratch:
        socket = Path(scratch) / "s.sock"
        code = _GRPCIO_SERVER if library == "grpcio" else _GRPCLIB_SERVER
        server = _started(code, socket, "ready")
        client = None
        try:
            client = _started(_CLIENT, socket, "called", str(retry_every))
            time.sleep(settle)  # a measurement window, not a wait for a condition
            before, threads_before, start = (
                tree_on_cpu_seconds(server.pid),
                on_cpu_by_thread(server.pid),
                time.monotonic(),
            )
            time.sleep(window)
            after, threads_after, elapsed = (
                tree_on_cpu_seconds(server.pid),
                on_cpu_by_thread(server.pid),
                time.monotonic() - start,
            )
            rss = tree_rss_mib(server.pid)
            if client.poll() is not None:
                raise RuntimeError("the client ended during the window")
        finally:
            for process in (client, server):
                if process is not None:
                    process.kill()
                    process.wait()
    by_thread = {
        name: round((threads_after.get(name, 0.0) - threads_before.get(name, 0.0)) / elapsed * 1000, 4)
        for name in threads_after
    }
    return {
        "library": library,
        "retry_every_s": retry_every,
        "idle_cpu_ms_per_s": round((after - before) / elapsed * 1000, 4),
        "idle_cpu_ms_per_s_by_thread": by_thread,
        "threads": len(threads_after),
        "rss_mib": rss,
    }


def main() -> None:
    """Alternate the libraries ``--runs`` times each and write every run and the medians."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--settle", type=float, default=5.0)
    parser.add_argument("--window", type=float, default=30.0)
    parser.add_argument("--retry-every", type=float, default=5.0)
    parser.add_argument("--output", type=Path, default=ROOT / "bench/results/grpc_idle.json")
    args = parser.parse_args()
    runs: list[dict[str, Any]] = []
    for index in range(args.runs):
        for library in LIBRARIES:
            for every in (0.0, args.retry_every):
                run = one_run(library, args.settle, args.window, every)
                print(f"[grpc-idle] run {index + 1} {json.dumps(run)}", flush=True)
                runs.append(run)

    def median(library: str, retrying: bool, figure: Any) -> float:
        chosen = [r for r in runs if r["library"] == library and bool(r["retry_every_s"]) == retrying]
        return float(statistics.median(figure(r) for r in chosen))

    medians = {
        library: {
            "idle_cpu_ms_per_s": median(library, False, lambda r: r["idle_cpu_ms_per_s"]),
            "rss_mib": median(library, False, lambda r: r["rss_mib"]["VmRSS"]),
            "retry_cpu_ms_per_s": median(library, True, lambda r: r["idle_cpu_ms_per_s"]),
        }
        for library in LIBRARIES
    }
    result = {
        "arguments": {
            "runs": args.runs,
            "settle": args.settle,
            "window": args.window,
            "retry_every": args.retry_every,
        },
        "python": platform.python_version(),
        "versions": {name: version(name) for name in ("grpcio", "grpclib", "h2", "protobuf")},
        "commit": subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip(),
        "medians": medians,
        "runs": runs,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1))
    print(json.dumps(medians, indent=1))


if __name__ == "__main__":
    main()
