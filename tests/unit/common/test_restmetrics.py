"""client-go's rest_client_* families: label values, buckets, the rate-limiter wait, and the common client."""

from __future__ import annotations

import asyncio
import pathlib
import uuid
from collections.abc import AsyncIterator

import pytest
from prometheus_client import REGISTRY

from imexdra.common.kube.client import PermanentApiError, RetryableApiError, kube_errors
from imexdra.common.kube.connection import connect, make_client
from imexdra.common.kube.models.core_v1 import ConfigMap
from imexdra.common.kube.restmetrics import (
    LATENCY_BUCKETS,
    SIZE_BUCKETS,
    TRANSPORT_ERROR,
    RestClientMetrics,
    server_host,
)
from imexdra.common.pacing.ratelimit import TokenBucket

CONFIGMAP = b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"ns"}}'
NOT_FOUND = b'{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"NotFound","code":404}'


def sample(name: str, **labels: str) -> float:
    """A sample of the default registry (0 when the series does not exist)."""
    return REGISTRY.get_sample_value(name, labels) or 0.0


def unique_host() -> str:
    """A host label no other test uses, so counters start at zero."""
    return f"{uuid.uuid4().hex[:8]}.test:6443"


def test_buckets_are_component_base_s() -> None:
    """Latency and size buckets are exactly client-go's, so dashboards' histogram_quantile lines agree."""
    assert LATENCY_BUCKETS == (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)
    assert SIZE_BUCKETS[0] == 64 and SIZE_BUCKETS[-1] == 16 * 1024 * 1024 and len(SIZE_BUCKETS) == 11


@pytest.mark.parametrize(
    ("server", "host"),
    [
        ("https://10.96.0.1:443", "10.96.0.1:443"),
        ("https://kube.example", "kube.example"),
        ("https://user:secret@kube.example:6443/prefix", "kube.example:6443"),
        ("https://[fd00::1]:6443", "[fd00::1]:6443"),
    ],
    ids=["in-cluster", "no-port", "credentials-dropped", "ipv6"],
)
def test_host_label_is_the_url_host(server: str, host: str) -> None:
    """``host`` is the server URL's host[:port] as written, no credentials or path (client-go's URL.Host)."""
    assert server_host(server) == host


def test_result_labels_code_method_host() -> None:
    """A response counts under its status as a string; no response under "<error>"."""
    host = unique_host()
    metrics = RestClientMetrics(host)
    metrics.result("PATCH", 200)
    metrics.result("PATCH", 200)
    metrics.result("GET", None)
    assert sample("rest_client_requests_total", code="200", method="PATCH", host=host) == 2
    assert sample("rest_client_requests_total", code=TRANSPORT_ERROR, method="GET", host=host) == 1
    assert TRANSPORT_ERROR == "<error>"


def test_completed_fills_duration_and_size_histograms() -> None:
    """Duration, request and response size are observed by verb and host; no response means no size."""
    host = unique_host()
    metrics = RestClientMetrics(host)
    metrics.completed("PUT", 0.02, sent=300, received=5000)
    metrics.completed("PUT", 3.0, sent=10, received=None)
    labels = {"verb": "PUT", "host": host}
    assert sample("rest_client_request_duration_seconds_count", **labels) == 2
    assert sample("rest_client_request_duration_seconds_bucket", le="0.025", **labels) == 1
    assert sample("rest_client_request_duration_seconds_bucket", le="4.0", **labels) == 2
    assert sample("rest_client_request_size_bytes_sum", **labels) == 310
    assert sample("rest_client_request_size_bytes_bucket", le="64.0", **labels) == 1
    assert sample("rest_client_response_size_bytes_count", **labels) == 1
    assert sample("rest_client_response_size_bytes_bucket", le="4096.0", **labels) == 0
    assert sample("rest_client_response_size_bytes_bucket", le="16384.0", **labels) == 1


@pytest.mark.looptime
async def test_rate_limiter_wait_is_observed() -> None:
    """The token bucket's wait lands in rest_client_rate_limiter_duration_seconds, zero waits included.

    On looptime's virtual clock, the bucket's: the waits are exact (0 and 50 ms), whatever the machine's
    load (on the wall clock a preempted process once measured its zero wait above 5 ms in CI).
    """
    host = unique_host()
    metrics = RestClientMetrics(host, TokenBucket(rate=20, burst=1, clock=asyncio.get_running_loop().time))
    await metrics.throttle("POST")  # the burst token: no wait
    await metrics.throttle("POST")  # one token at 20/s: 50 ms
    await RestClientMetrics(host).throttle("POST")  # no limit configured: nothing to observe
    labels = {"verb": "POST", "host": host}
    assert sample("rest_client_rate_limiter_duration_seconds_count", **labels) == 2
    assert sample("rest_client_rate_limiter_duration_seconds_bucket", le="0.005", **labels) == 1
    assert sample("rest_client_rate_limiter_duration_seconds_sum", **labels) == pytest.approx(0.05, abs=0.002)


async def respond(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """A one-request API server stand-in: 200 with a ConfigMap for "a", 404 for anything else."""
    request_line = await reader.readline()
    while (await reader.readline()).strip():
        pass
    found = b"/configmaps/a" in request_line
    status, body = (b"200 OK", CONFIGMAP) if found else (b"404 Not Found", NOT_FOUND)
    head = b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n" % (status, len(body))
    writer.write(head + b"Connection: close\r\n\r\n" + body)
    await writer.drain()
    writer.close()


@pytest.fixture
async def api_port() -> AsyncIterator[int]:
    """Port of a local plain-HTTP stand-in for the API server."""
    server = await asyncio.start_server(respond, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()


def kubeconfig(tmp_path: pathlib.Path, port: int) -> pathlib.Path:
    """A kubeconfig for ``http://127.0.0.1:<port>``."""
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f'clusters: [{{name: c, cluster: {{server: "http://127.0.0.1:{port}"}}}}]\n'
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
    )
    return path


async def test_common_client_records_every_family(tmp_path: pathlib.Path, api_port: int) -> None:
    """Through make_client: code/method/host per response, duration and sizes, the QPS wait."""
    host = f"127.0.0.1:{api_port}"
    client = make_client(field_manager="t", kubeconfig=kubeconfig(tmp_path, api_port), qps=100, burst=5)
    try:
        await client.get(ConfigMap, "a", namespace="ns")
        with pytest.raises(PermanentApiError), kube_errors("get b"):
            await client.get(ConfigMap, "b", namespace="ns")
    finally:
        client.close()
    assert sample("rest_client_requests_total", code="200", method="GET", host=host) == 1
    assert sample("rest_client_requests_total", code="404", method="GET", host=host) == 1
    labels = {"verb": "GET", "host": host}
    assert sample("rest_client_request_duration_seconds_count", **labels) == 2
    assert sample("rest_client_response_size_bytes_sum", **labels) == len(CONFIGMAP) + len(NOT_FOUND)
    assert sample("rest_client_rate_limiter_duration_seconds_count", **labels) == 2


async def test_common_client_counts_transport_errors(tmp_path: pathlib.Path) -> None:
    """A refused connection counts as code "<error>" (no response, still a request)."""
    client = make_client(field_manager="t", kubeconfig=kubeconfig(tmp_path, 9))
    try:
        with pytest.raises(RetryableApiError), kube_errors("get a"):
            await client.get(ConfigMap, "a", namespace="ns")
    finally:
        client.close()
    assert sample("rest_client_requests_total", code="<error>", method="GET", host="127.0.0.1:9") >= 1


async def test_watches_count_as_get_and_are_not_timed(tmp_path: pathlib.Path, api_port: int) -> None:
    """A watch is a GET in rest_client_requests_total, and neither throttled nor in the duration histogram."""
    host = f"127.0.0.1:{api_port}"
    client = make_client(field_manager="t", kubeconfig=kubeconfig(tmp_path, api_port), qps=100, burst=5)
    try:
        with pytest.raises(PermanentApiError):
            async with client.watch(ConfigMap, namespace="ns") as events:
                _ = [event async for event in events]
    finally:
        client.close()
    assert sample("rest_client_requests_total", code="404", method="GET", host=host) == 1
    labels = {"verb": "GET", "host": host}
    assert sample("rest_client_request_duration_seconds_count", **labels) == 0
    assert sample("rest_client_rate_limiter_duration_seconds_count", **labels) == 0


async def test_a_connection_s_two_clients_share_one_bucket(tmp_path: pathlib.Path, api_port: int) -> None:
    """A transport and the typed client of one connection draw from one QPS bucket: with qps=2 and
    burst=1, the client's request after the transport's waits about half a second."""
    host = f"127.0.0.1:{api_port}"
    connection = connect(kubeconfig(tmp_path, api_port), qps=2, burst=1)
    transport = connection.transport(user_agent="imexdra-tests")
    client = connection.kube(field_manager="t")
    try:
        await transport.request("GET", "/api/v1/namespaces/ns/configmaps/a")
        await client.get(ConfigMap, "a", namespace="ns")
    finally:
        transport.close()
        client.close()
    labels = {"verb": "GET", "host": host}
    assert sample("rest_client_rate_limiter_duration_seconds_count", **labels) == 2
    assert 0.3 <= sample("rest_client_rate_limiter_duration_seconds_sum", **labels) < 2.0
