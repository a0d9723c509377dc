"""The lean HTTP transport against a scripted local HTTP server."""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import base64
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from imexdra.api.computedomain import ComputeDomain
from imexdra.common.kube.client import PermanentApiError, RetryableApiError
from imexdra.common.kube.kubeconfig import Cluster, Context, SingleConfig, User
from imexdra.common.kube.models.apps_v1 import DaemonSet
from imexdra.common.kube.models.core_v1 import Node
from imexdra.common.kube.transport import _MAX_CONNECTIONS, TLS_READ_BUFFER, Transport, resource_path
from imexdra_sim.localcluster.pki import ClusterPKI
from tests.support.connectproxy import connect_proxy
from tests.support.httpscript import ScriptedServer, chunked, close_without_answer, reply, serving


@pytest.fixture
async def server() -> AsyncIterator[ScriptedServer]:
    scripted = ScriptedServer()
    async with serving(scripted.handle) as scripted.port:
        yield scripted


def transport(server: ScriptedServer, user: User | None = None, proxy: str | None = None) -> Transport:
    return Transport(server.kubeconfig(user), proxy=proxy)


async def test_keeps_connections_alive_and_sends_json(server: ScriptedServer) -> None:
    """Two requests share one connection; body, content type, query and bearer token are sent."""
    server.replies = [reply(201, b'{"a":1}'), reply(200)]
    client = transport(server, User(token="s3cr3t"))
    response = await client.request("POST", "/api/v1/x", query={"fieldManager": "m"}, body={"k": "v"})
    assert (response.status, response.body) == (201, b'{"a":1}')
    await client.request("PATCH", "/api/v1/x", body=[1], content_type="application/json-patch+json")
    assert server.connections == 1
    first = server.requests[0]
    assert first.startswith(b"POST /api/v1/x?fieldManager=m HTTP/1.1\r\n")
    assert b"Authorization: Bearer s3cr3t\r\n" in first and first.endswith(b'\r\n\r\n{"k":"v"}')
    assert b"Content-Type: application/json-patch+json" in server.requests[1]
    client.close()


async def test_tls_connections_read_through_the_bounded_buffer(tmp_path: Path) -> None:
    """Over TLS, with asyncio's read buffer bounded, a body many times the buffer arrives whole."""
    authority = ClusterPKI(tmp_path)
    serving_cert = authority.issue("api", common_name="api", ip_addresses=("127.0.0.1",), server=True)
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(serving_cert.cert, serving_cert.key)
    body = b'{"items":"' + b"x" * (40 * TLS_READ_BUFFER) + b'"}'
    scripted = ScriptedServer(replies=[reply(200, body), reply(200, body)])
    listener = await asyncio.start_server(scripted.handle, "127.0.0.1", 0, ssl=server_tls)  # type: ignore[arg-type]
    port = listener.sockets[0].getsockname()[1]
    config = SingleConfig(
        context_name="t", context=Context(cluster="c"), cluster=Cluster(server=f"https://127.0.0.1:{port}")
    )
    client_tls = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    try:
        client = Transport(config, tls=client_tls)
        assert asyncio.sslproto.SSLProtocol.max_size == TLS_READ_BUFFER
        for _ in range(2):
            assert (await client.request("GET", "/big")).body == body
        assert scripted.connections == 1
        client.close()
    finally:
        listener.close()


async def test_reads_chunked_bodies(server: ScriptedServer) -> None:
    """A chunked response is reassembled."""
    server.replies = [chunked(b'{"kind":', b'"Status"}')]
    response = await transport(server).request("GET", "/x")
    assert response.body == b'{"kind":"Status"}'


async def test_connection_closed_by_server_is_not_reused(server: ScriptedServer) -> None:
    """After ``Connection: close`` the next request opens a new connection."""
    server.replies = [reply(200, b"{}", "Connection: close"), reply(200)]
    client = transport(server)
    await client.request("GET", "/x")
    await client.request("GET", "/x")
    assert server.connections == 2


async def test_a_pooled_connection_closed_while_idle_is_replaced(server: ScriptedServer) -> None:
    """A request on a connection the server dropped silently goes out again on a fresh one."""
    server.replies = [reply(200), close_without_answer, reply(200, b'{"ok":1}')]
    client = transport(server)
    await client.request("GET", "/x")
    response = await client.request("GET", "/y")
    assert response.body == b'{"ok":1}'
    assert server.connections == 2


async def test_requests_beyond_the_connection_bound_wait_for_a_free_connection() -> None:
    """Three times the bound sent at once: never more than the bound open, each connection reused."""
    open_now = peak = accepted = 0
    all_open = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal open_now, peak, accepted
        open_now, accepted = open_now + 1, accepted + 1
        peak = max(peak, open_now)
        if open_now == _MAX_CONNECTIONS:
            all_open.set()
        try:
            while True:
                try:
                    await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    break
                await all_open.wait()  # no answer before the bound is reached
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
                await writer.drain()
        finally:
            open_now -= 1
            writer.close()

    listener = await asyncio.start_server(handle, "127.0.0.1", 0)
    client = transport(ScriptedServer(port=listener.sockets[0].getsockname()[1]))
    answers = await asyncio.gather(*(client.request("GET", "/x") for _ in range(3 * _MAX_CONNECTIONS)))
    assert [a.status for a in answers] == [200] * (3 * _MAX_CONNECTIONS)
    assert (peak, accepted) == (_MAX_CONNECTIONS, _MAX_CONNECTIONS)
    client.close()
    listener.close()


@pytest.mark.parametrize(
    ("status", "error_type", "retry_after"),
    [
        (409, RetryableApiError, None),
        (429, RetryableApiError, 3.0),
        (422, PermanentApiError, None),
        (403, PermanentApiError, None),
        (401, PermanentApiError, None),
    ],
    ids=["conflict", "throttled", "invalid", "forbidden", "unauthorized"],
)
async def test_errors_carry_status_reason_and_retry_after(
    server: ScriptedServer, status: int, error_type: type[Exception], retry_after: float | None
) -> None:
    """Non-2xx answers become the common API errors with code, reason, message and Retry-After.

    401 and 403 are permanent, as in client-go: the controller's writes retry them themselves.
    """
    body = b'{"kind":"Status","reason":"Why","message":"because"}'
    server.replies = [reply(status, body, "Retry-After: 3")]
    with pytest.raises(error_type) as raised:
        await transport(server).request("PATCH", "/x", body={})
    error = raised.value
    assert getattr(error, "code", None) == status
    assert getattr(error, "reason", None) == "Why"
    assert "because" in str(error)
    if isinstance(error, RetryableApiError) and status == 429:
        assert error.retry_after == retry_after


async def test_unreachable_server_is_a_retryable_error() -> None:
    """A refused connection is a retryable error without a status code."""
    config = SingleConfig(
        context_name="t", context=Context(cluster="c"), cluster=Cluster(server="http://127.0.0.1:9")
    )
    with pytest.raises(RetryableApiError) as raised:
        await Transport(config, timeout=2).request("GET", "/x")
    assert raised.value.code is None


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_requests_are_recorded_like_client_go_s(server: ScriptedServer) -> None:
    """code/method/host per response, duration and body sizes; a refused connection is code "<error>"."""
    server.replies = [reply(201, b'{"a":1}'), reply(409)]
    sender = transport(server)
    host = f"127.0.0.1:{server.port}"
    await sender.request("POST", "/x", body={"b": 2})
    with pytest.raises(RetryableApiError):
        await sender.request("POST", "/x", body={})
    sender.close()
    assert sample("rest_client_requests_total", code="201", method="POST", host=host) == 1
    assert sample("rest_client_requests_total", code="409", method="POST", host=host) == 1
    labels = {"verb": "POST", "host": host}
    assert sample("rest_client_request_duration_seconds_count", **labels) == 2
    assert sample("rest_client_request_size_bytes_sum", **labels) == len(b'{"b":2}') + len(b"{}")
    assert sample("rest_client_response_size_bytes_sum", **labels) == len(b'{"a":1}') + len(b"{}")
    config = SingleConfig(
        context_name="t", context=Context(cluster="c"), cluster=Cluster(server="http://127.0.0.1:9")
    )
    failed = {"code": "<error>", "method": "PUT", "host": "127.0.0.1:9"}
    before = sample("rest_client_requests_total", **failed)
    with pytest.raises(RetryableApiError):
        await Transport(config, timeout=2).request("PUT", "/x")
    assert sample("rest_client_requests_total", **failed) == before + 1


async def test_a_401_is_sent_again_with_a_fresh_token(server: ScriptedServer, tmp_path: Path) -> None:
    """A 401 with a token file behind it re-reads the file and sends the request once more."""
    token = tmp_path / "token"
    token.write_text("old")
    server.replies = [reply(401), reply(200)]
    lean = transport(server, User(token_file=str(token)))
    await lean.request("GET", "/x")  # reads "old": within the minute, the 401 is what makes it read again
    token.write_text("new")
    server.replies = [reply(401), reply(200)]
    await lean.request("GET", "/y")
    assert [b"Bearer new" in r for r in server.requests] == [False, False, False, True]


async def test_requests_go_through_an_http_connect_proxy(server: ScriptedServer) -> None:
    """With a proxy, each connection is a CONNECT tunnel (with the proxy's basic credentials)."""
    server.replies = [reply(200, b"{}"), reply(200, b"{}")]
    async with connect_proxy() as proxy:
        lean = transport(server, proxy=proxy.url.replace("http://", "http://me:s%3Acret@"))
        await lean.request("GET", "/x")
        await lean.request("GET", "/y")
        lean.close()
    assert proxy.targets == [f"127.0.0.1:{server.port}"]  # one tunnel, kept alive
    assert proxy.authorizations == ["Basic " + base64.b64encode(b"me:s:cret").decode()]
    assert len(server.requests) == 2


async def test_requests_go_through_a_socks5_proxy(server: ScriptedServer) -> None:
    """A socks5 proxy gets the server's host and port and the URL's username and password."""
    server.replies = [reply(200, b"{}"), reply(200, b"{}")]
    async with connect_proxy("socks5") as proxy:
        lean = transport(server, proxy=proxy.url.replace("socks5://", "socks5://me:pw@"))
        await lean.request("GET", "/x")
        await lean.request("GET", "/y")
        lean.close()
    assert proxy.targets == [f"127.0.0.1:{server.port}"]
    assert proxy.authorizations == ["me:pw"]
    assert len(server.requests) == 2


async def test_requests_go_through_an_https_proxy(
    server: ScriptedServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An https proxy is reached over TLS, verified against the system trust (SSL_CERT_FILE here)."""
    server.replies = [reply(200, b"{}")]
    async with connect_proxy("https", pki=tmp_path) as proxy:
        monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.crt"))
        lean = transport(server, proxy=proxy.url)
        await lean.request("GET", "/x")
        lean.close()
        monkeypatch.delenv("SSL_CERT_FILE")
        with pytest.raises(RetryableApiError, match="CERTIFICATE_VERIFY_FAILED"):
            await transport(server, proxy=proxy.url).request("GET", "/y")
    assert proxy.targets == [f"127.0.0.1:{server.port}"]


@pytest.mark.parametrize(
    ("scheme", "message"), [("http", "proxy refused CONNECT"), ("socks5", "could not connect")]
)
async def test_a_refused_tunnel_is_a_retryable_error(
    server: ScriptedServer, scheme: str, message: str
) -> None:
    """A proxy refusing the tunnel (CONNECT 407, SOCKS5 "not allowed") fails the request as a transport
    error that says so."""
    async with connect_proxy(scheme) as proxy:
        proxy.refuse = True
        with pytest.raises(RetryableApiError, match=message):
            await transport(server, proxy=proxy.url).request("GET", "/x")


@pytest.mark.parametrize(
    ("res", "name", "namespace", "path"),
    [
        (Node, "n1", None, "/api/v1/nodes/n1"),
        (DaemonSet, None, "drv", "/apis/apps/v1/namespaces/drv/daemonsets"),
        (ComputeDomain, "cd", "ns", "/apis/resource.nvidia.com/v1beta1/namespaces/ns/computedomains/cd"),
        (
            ComputeDomain.Status,
            "cd",
            "ns",
            "/apis/resource.nvidia.com/v1beta1/namespaces/ns/computedomains/cd/status",
        ),
    ],
    ids=["core-cluster", "group-collection", "custom-object", "status-subresource"],
)
def test_resource_paths(res: type, name: str | None, namespace: str | None, path: str) -> None:
    """Paths follow the API conventions for core/group, cluster/namespaced and subresources."""
    assert resource_path(res, name, namespace=namespace) == path
