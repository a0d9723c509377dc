"""Prometheus metrics of the shared machinery and the one HTTP server for /metrics, /healthz and /readyz.

Metric names follow client-go where it has an equivalent (``workqueue_*``, ``leader_election_master_status``;
the API client's ``rest_client_*`` families are in ``common.kube.restmetrics``) so existing dashboards work;
machinery client-go has no metric for is prefixed ``imexdra_``. Everything lives in prometheus-client's
default registry, which also carries the process and platform collectors. docs/metrics.md lists them all.

The server is a deliberately tiny HTTP/1.1 responder on ``asyncio.start_server`` (one request per
connection, GET only): it runs on the component's event loop, so health checks read live state without
locks, and it needs no web framework. With a profiling path it also serves the endpoints of
``common.observability.pprof``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from urllib.parse import urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import generate_latest

_LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 60.0, 300.0)

WORKQUEUE_DEPTH = Gauge("workqueue_depth", "Current depth of the work queue.", ["name"])
WORKQUEUE_ADDS = Counter("workqueue_adds_total", "Items handed to the work queue.", ["name"])
WORKQUEUE_RETRIES = Counter("workqueue_retries_total", "Rate-limited re-queues of failed items.", ["name"])
WORKQUEUE_QUEUE_DURATION = Histogram(
    "workqueue_queue_duration_seconds",
    "How long an item waits in the queue before a worker takes it.",
    ["name"],
    buckets=_LATENCY_BUCKETS,
)
WORKQUEUE_WORK_DURATION = Histogram(
    "workqueue_work_duration_seconds",
    "How long processing one item takes.",
    ["name"],
    buckets=_LATENCY_BUCKETS,
)
REFLECTOR_LISTS = Counter(
    "imexdra_reflector_lists_total",
    "Full LISTs completed by informers; reason is initial or expired (relist after 410 Gone).",
    ["resource", "reason"],
)
REFLECTOR_WATCH_EVENTS = Counter(
    "imexdra_reflector_watch_events_total", "Watch events received by informers.", ["resource", "type"]
)
LEADER_STATUS = Gauge(
    "leader_election_master_status", "1 while this process holds the named lease, else 0.", ["name"]
)
EVENTS_DROPPED = Counter(
    "imexdra_events_dropped_total",
    "Kubernetes Events not written: reason is queue_full, spam_filter or api_error.",
    ["reason"],
)

Check = Callable[[], bool]


@dataclass(slots=True)
class Probes:
    """Named liveness and readiness checks served at /healthz and /readyz.

    A check is a cheap synchronous callable returning True when healthy (e.g. ``informer.has_synced``).
    """

    liveness: dict[str, Check] = field(default_factory=dict)
    readiness: dict[str, Check] = field(default_factory=dict)

    def add_liveness(self, name: str, check: Check) -> None:
        """Register a check that must pass for /healthz (and /readyz) to report ok."""
        self.liveness[name] = check

    def add_readiness(self, name: str, check: Check) -> None:
        """Register a check that must pass for /readyz to report ok."""
        self.readiness[name] = check


def render_checks(checks: dict[str, Check], *, verbose: bool) -> tuple[HTTPStatus, str]:
    """Run ``checks`` and render them the way kube-apiserver renders its health endpoints."""
    lines: list[str] = []
    healthy = True
    for name, check in checks.items():
        try:
            ok = bool(check())
        except Exception:  # a crashing check is a failing check, never a crashing server
            ok = False
        healthy &= ok
        lines.append(f"[+]{name} ok" if ok else f"[-]{name} failed")
    status = HTTPStatus.OK if healthy else HTTPStatus.INTERNAL_SERVER_ERROR
    if healthy and not verbose:
        return status, "ok\n"
    verdict = "passed" if healthy else "failed"
    return status, "\n".join([*lines, f"healthz check {verdict}", ""])


def _path(request_line: list[str]) -> str:
    return urlsplit(request_line[1]).path


@dataclass(frozen=True, slots=True)
class _Response:
    status: HTTPStatus
    content_type: str
    body: bytes


def _route(
    method: str, target: str, *, probes: Probes, registry: CollectorRegistry, metrics_path: str
) -> _Response:
    url = urlsplit(target)
    if method != "GET":
        return _Response(HTTPStatus.METHOD_NOT_ALLOWED, "text/plain", b"only GET is served\n")
    if metrics_path and url.path == metrics_path:
        return _Response(HTTPStatus.OK, CONTENT_TYPE_LATEST, generate_latest(registry))
    verbose = "verbose" in url.query.split("&")
    if url.path in ("/healthz", "/livez"):
        status, text = render_checks(probes.liveness, verbose=verbose)
    elif url.path == "/readyz":
        status, text = render_checks({**probes.liveness, **probes.readiness}, verbose=verbose)
    else:
        return _Response(HTTPStatus.NOT_FOUND, "text/plain", b"not found\n")
    return _Response(status, "text/plain; charset=utf-8", text.encode())


async def start_http_server(
    host: str,
    port: int,
    *,
    probes: Probes,
    registry: CollectorRegistry = REGISTRY,
    metrics_path: str = "/metrics",
    pprof_path: str = "",
) -> asyncio.Server:
    """Start serving metrics and probes on ``host:port`` (port 0 picks a free one); close the result to stop.

    An empty ``metrics_path`` disables /metrics, as upstream's ``--metrics-path=""`` does; a non-empty
    ``pprof_path`` serves the profiling endpoints (``common.observability.pprof``) below it, an empty one
    none (404).
    """
    profiler = None
    if pprof_path:
        # Imported only when asked for: otherwise every process would pay its RSS (bench/README.md).
        from imexdra.common.observability.pprof import Profiler

        profiler = Profiler(pprof_path)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(10):
                request_line = (await reader.readline()).decode("latin-1").split()
                while (await reader.readline()).strip():  # headers are not needed
                    pass
            if len(request_line) != 3:
                response = _Response(HTTPStatus.BAD_REQUEST, "text/plain", b"bad request\n")
            elif profiler is not None and request_line[0] == "GET" and profiler.matches(_path(request_line)):
                url = urlsplit(request_line[1])
                status, text = await profiler.respond(url.path, url.query)
                response = _Response(status, "text/plain; charset=utf-8", text.encode())
            else:
                response = _route(
                    request_line[0],
                    request_line[1],
                    probes=probes,
                    registry=registry,
                    metrics_path=metrics_path,
                )
            head = (
                f"HTTP/1.1 {response.status.value} {response.status.phrase}\r\n"
                f"Content-Type: {response.content_type}\r\n"
                f"Content-Length: {len(response.body)}\r\n"
                "Connection: close\r\n\r\n"
            )
            writer.write(head.encode("latin-1") + response.body)
            await writer.drain()
        except (TimeoutError, ConnectionError, ValueError):
            pass  # a slow, vanished or garbled client is its own problem
        finally:
            writer.close()

    return await asyncio.start_server(handle, host, port)
