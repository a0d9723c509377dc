"""The metrics and probe server: routing, Kubernetes-style health output, and failing checks."""

import asyncio
from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry, Counter

from imexdra.common.observability.metrics import Probes, render_checks, start_http_server
from tests.support.http import http_get


def boom() -> bool:
    """A check that crashes."""
    raise RuntimeError("check crashed")


@pytest.mark.parametrize(
    ("checks", "verbose", "status", "body"),
    [
        ({"a": lambda: True}, False, 200, "ok\n"),
        ({"a": lambda: True}, True, 200, "[+]a ok\nhealthz check passed\n"),
        ({"a": lambda: True, "b": lambda: False}, False, 500, "[+]a ok\n[-]b failed\nhealthz check failed\n"),
        ({"a": boom}, False, 500, "[-]a failed\nhealthz check failed\n"),
        ({}, False, 200, "ok\n"),
    ],
    ids=["ok", "ok-verbose", "one-failing", "crashing-check", "no-checks"],
)
def test_render_checks(checks, verbose: bool, status: int, body: str) -> None:
    """Checks render like kube-apiserver's health endpoints; a crashing check counts as failed."""
    got_status, got_body = render_checks(checks, verbose=verbose)
    assert (got_status, got_body) == (status, body)


@pytest.fixture
async def served() -> AsyncIterator[tuple[int, Probes, Counter]]:
    """A server on a free port with its own registry, a counter in it and mutable probes."""
    registry = CollectorRegistry()
    counter = Counter("test_things_total", "Things.", registry=registry)
    probes = Probes()
    server = await start_http_server("127.0.0.1", 0, probes=probes, registry=registry)
    port = server.sockets[0].getsockname()[1]
    yield port, probes, counter
    server.close()
    await server.wait_closed()


async def test_metrics_endpoint_serves_the_registry(served) -> None:
    """GET /metrics returns the Prometheus text format of the registry."""
    port, _, counter = served
    counter.inc(3)
    status, headers, body = await http_get(port, "/metrics")
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain")
    assert "test_things_total 3.0" in body
    assert int(headers["Content-Length"]) == len(body.encode())


async def test_readyz_includes_liveness_and_readiness(served) -> None:
    """/healthz sees liveness checks only; /readyz sees both and fails until every check passes."""
    port, probes, _ = served
    synced = False
    probes.add_liveness("loop", lambda: True)
    probes.add_readiness("informers", lambda: synced)
    assert (await http_get(port, "/healthz"))[0] == 200
    status, _, body = await http_get(port, "/readyz")
    assert status == 500 and "[-]informers failed" in body and "[+]loop ok" in body
    synced = True
    assert (await http_get(port, "/readyz"))[::2] == (200, "ok\n")
    assert "[+]informers ok" in (await http_get(port, "/readyz?verbose"))[2]


@pytest.mark.parametrize(
    ("method", "target", "status"),
    [("GET", "/nope", 404), ("POST", "/metrics", 405), ("GET", "/livez", 200)],
    ids=["unknown-path", "post", "livez-alias"],
)
async def test_routing(served, method: str, target: str, status: int) -> None:
    """Unknown paths are 404, other methods 405, /livez is an alias of /healthz."""
    port, _, _ = served
    assert (await http_get(port, target, method))[0] == status


async def test_garbage_request_gets_400(served) -> None:
    """A malformed request line is answered with 400, not a crash."""
    port, _, _ = served
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"nonsense\r\n\r\n")
    raw = await asyncio.wait_for(reader.read(), 5)
    writer.close()
    assert raw.startswith(b"HTTP/1.1 400")


async def test_metrics_can_be_disabled() -> None:
    """An empty metrics path serves probes only."""
    server = await start_http_server(
        "127.0.0.1", 0, probes=Probes(), registry=CollectorRegistry(), metrics_path=""
    )
    port = server.sockets[0].getsockname()[1]
    try:
        assert (await http_get(port, "/metrics"))[0] == 404
        assert (await http_get(port, "/healthz"))[0] == 200
    finally:
        server.close()
        await server.wait_closed()
