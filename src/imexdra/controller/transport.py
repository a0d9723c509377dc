"""A lean HTTP/1.1 keep-alive transport for the controller's API writes.

Why: through lightkube and httpx2 one API request costs about 4 ms of CPU on the target machine (URL
parsing three times, anyio and httpcore layers); the same request over a plain TLS stream costs about
0.3 ms and a third of the latency. Every ComputeDomain costs the controller several writes, so for
bursts of hundreds of domains the controller sends its writes here (docs/architecture.md §6). Reads stay on
the informers (``common.informer``); Events and the Lease stay on the common client.

Scope, deliberately small: JSON bodies, ``Content-Length`` or chunked responses, a pool of persistent
connections (a request finding a pooled connection closed by the server is sent on the next or a fresh
one), the kubeconfig's TLS and credentials (client certificates, bearer token, token file re-read every
minute as projected ServiceAccount tokens rotate, basic auth); exec and auth-provider plugins are
refused at start. Failures are the common ``ApiStatusError`` types (401 and 403 retryable, see
``_RETRYABLE_AUTH``); requests are paced by a ``--kube-api-qps``/``--kube-api-burst`` token bucket and
recorded in client-go's ``rest_client_*`` families (``common.restmetrics``), exactly as the common
client's are.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import msgspec
from lightkube.config.client_adapter import verify_cluster
from lightkube.config.kubeconfig import SingleConfig
from lightkube.config.models import User
from lightkube.core import resource as lkr

from imexdra.common.errors import ConfigError
from imexdra.common.kube import PermanentApiError, RetryableApiError, is_retryable_status
from imexdra.common.logging import REQUEST_LOGGER
from imexdra.common.ratelimit import TokenBucket
from imexdra.common.restmetrics import RestClientMetrics, server_host

_requests_log = logging.getLogger(REQUEST_LOGGER)

#: Retried by the controller although ``is_retryable_status`` calls them permanent: authentication and
#: authorization change without any event that would bring a domain back to the queue. A kube-apiserver
#: that has just restarted answers 403 until its RBAC caches are filled (test_control_plane_faults: a
#: burst of domains reconciled then was dropped until the 10-minute resync); RBAC applied after the
#: controller started, and rotated tokens, are the same. Upstream's controller requeues every error.
_RETRYABLE_AUTH = frozenset({401, 403})
_TOKEN_FILE_REFRESH_SECONDS = 60.0
_MAX_IDLE_CONNECTIONS = 32
_TRANSPORT_ERRORS = (
    OSError,
    TimeoutError,
    asyncio.IncompleteReadError,
    asyncio.LimitOverrunError,
    ValueError,
)


@dataclass(frozen=True, slots=True)
class Response:
    """A successful API response."""

    status: int
    body: bytes


class _Credentials:
    """The Authorization header of a kubeconfig user (None: client certificate, or anonymous)."""

    def __init__(self, user: User | None, abs_file: Callable[[str], Any]) -> None:
        self._header: str | None = None
        self._token_file: Path | None = None
        self._read_at = -_TOKEN_FILE_REFRESH_SECONDS
        if user is None:
            return
        if user.exec is not None or user.auth_provider is not None:
            raise ConfigError("exec and auth-provider credentials are not supported by the controller")
        if user.token_file is not None:
            self._token_file = Path(abs_file(user.token_file))
        elif user.token is not None:
            self._header = f"Bearer {user.token}"
        elif user.username and user.password:
            basic = base64.b64encode(f"{user.username}:{user.password}".encode()).decode()
            self._header = f"Basic {basic}"

    def header(self) -> str | None:
        """The current header value (a token file is re-read once a minute)."""
        if self._token_file is not None and time.monotonic() - self._read_at >= _TOKEN_FILE_REFRESH_SECONDS:
            self._header = f"Bearer {self._token_file.read_text().strip()}"
            self._read_at = time.monotonic()
        return self._header


@dataclass(slots=True)
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter


class _StaleConnectionError(ConnectionError):
    """A pooled connection was closed by the server before it answered."""


class Transport:
    """Sends requests to one API server over pooled persistent connections."""

    def __init__(
        self, config: SingleConfig, *, qps: float | None = None, burst: int = 10, timeout: float = 30.0
    ) -> None:
        url = urlsplit(config.cluster.server)
        self._host = url.hostname or "localhost"
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._prefix = url.path.rstrip("/")
        self._ssl: ssl.SSLContext | None = None
        if url.scheme == "https":
            self._ssl = verify_cluster(config.cluster, config.user or User(), config.abs_file)
        self._credentials = _Credentials(config.user, config.abs_file)
        self._bucket = TokenBucket(rate=qps, burst=burst) if qps else None
        self._metrics = RestClientMetrics(server_host(config.cluster.server))
        self._timeout = timeout
        self._idle: list[_Connection] = []

    def close(self) -> None:
        """Close every pooled connection."""
        while self._idle:
            self._idle.pop().writer.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> Response:
        """Send one request; raise an ``ApiStatusError`` unless the server answers 2xx."""
        started = time.monotonic()
        await self._metrics.throttle(self._bucket, method)
        payload = b"" if body is None else msgspec.json.encode(body)
        target = f"{self._prefix}{path}" + (f"?{urlencode(query)}" if query else "")
        head = self._head(method, target, len(payload), content_type if body is not None else None)
        action = f"{method} {path}"
        try:
            async with asyncio.timeout(self._timeout):
                status, headers, answer = await self._exchange(head + payload)
        except _TRANSPORT_ERRORS as error:
            self._metrics.result(method, None)
            self._metrics.completed(method, time.monotonic() - started, sent=len(payload), received=None)
            raise RetryableApiError(f"{action}: {type(error).__name__}: {error}", code=None) from error
        self._metrics.result(method, status)
        self._metrics.completed(method, time.monotonic() - started, sent=len(payload), received=len(answer))
        _requests_log.info('HTTP Request: %s %s "%d"', method, target, status)  # shown from verbosity 6
        if 200 <= status < 300:
            return Response(status, answer)
        raise _status_error(action, status, headers, answer)

    def _head(self, method: str, target: str, length: int, content_type: str | None) -> bytes:
        lines = [
            f"{method} {target} HTTP/1.1",
            f"Host: {self._host}:{self._port}",
            "User-Agent: compute-domain-controller",
            "Accept: application/json",
            f"Content-Length: {length}",
        ]
        if content_type is not None:
            lines.append(f"Content-Type: {content_type}")
        authorization = self._credentials.header()
        if authorization is not None:
            lines.append(f"Authorization: {authorization}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    async def _exchange(self, message: bytes) -> tuple[int, dict[str, str], bytes]:
        while self._idle:
            try:
                return await self._round_trip(self._idle.pop(), message, reused=True)
            except _StaleConnectionError:
                continue
        reader, writer = await asyncio.open_connection(
            self._host, self._port, ssl=self._ssl, server_hostname=self._host if self._ssl else None
        )
        return await self._round_trip(_Connection(reader, writer), message, reused=False)

    async def _round_trip(
        self, connection: _Connection, message: bytes, *, reused: bool
    ) -> tuple[int, dict[str, str], bytes]:
        keep = False
        try:
            try:
                connection.writer.write(message)
                await connection.writer.drain()
                status_line = await connection.reader.readline()
            except (ConnectionError, ssl.SSLError) as error:
                if reused:  # closed by the server while idle: nothing was processed
                    raise _StaleConnectionError(str(error)) from error
                raise
            if not status_line:
                if reused:
                    raise _StaleConnectionError("closed by the server")
                raise ConnectionResetError("connection closed before the status line")
            status, headers, body = await _read_response(connection.reader, status_line)
            keep = headers.get("connection", "").lower() != "close"
            return status, headers, body
        finally:
            if keep and len(self._idle) < _MAX_IDLE_CONNECTIONS:
                self._idle.append(connection)
            else:
                connection.writer.close()


async def _read_response(
    reader: asyncio.StreamReader, status_line: bytes
) -> tuple[int, dict[str, str], bytes]:
    parts = status_line.split(None, 2)
    if len(parts) < 2 or not parts[1].isdigit():
        raise ValueError(f"malformed status line {status_line[:80]!r}")
    headers: dict[str, str] = {}
    while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = await _read_chunked(reader)
    else:
        body = await reader.readexactly(int(headers.get("content-length", "0")))
    return int(parts[1]), headers, body


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    chunks = []
    while size := int((await reader.readline()).split(b";", 1)[0].strip(), 16):
        chunks.append(await reader.readexactly(size))
        await reader.readexactly(2)  # the CRLF closing the chunk
    while (await reader.readline()) not in (b"\r\n", b"\n", b""):
        pass  # trailers
    return b"".join(chunks)


class _Status(msgspec.Struct):
    reason: str = ""
    message: str = ""


def _status_error(
    action: str, status: int, headers: Mapping[str, str], body: bytes
) -> RetryableApiError | PermanentApiError:
    try:
        decoded = msgspec.json.decode(body, type=_Status)
    except msgspec.DecodeError:
        decoded = _Status(message=body[:200].decode(errors="replace"))
    message = f"{action}: {status} {decoded.reason}: {decoded.message}".rstrip(": ")
    if is_retryable_status(status) or status in _RETRYABLE_AUTH:
        retry_after = headers.get("retry-after", "")
        wait = float(retry_after) if retry_after.isdigit() else None
        return RetryableApiError(message, code=status, reason=decoded.reason, retry_after=wait)
    return PermanentApiError(message, code=status, reason=decoded.reason)


def resource_path(res: type[Any], name: str | None = None, *, namespace: str | None = None) -> str:
    """URL path of a lightkube resource class's collection, or of one object and its subresource."""
    info = lkr.api_info(res)
    group, version = info.resource.group, info.resource.version
    path = f"/apis/{group}/{version}" if group else f"/api/{version}"
    if namespace:
        path += f"/namespaces/{quote(namespace, safe='')}"
    path += f"/{info.plural}"
    if name is not None:
        path += f"/{quote(name, safe='')}"
        if info.action:
            path += f"/{info.action}"
    return path
