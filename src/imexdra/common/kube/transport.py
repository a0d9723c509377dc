"""A lean HTTP/1.1 keep-alive transport for the API requests on hot paths.

Why: through lightkube and httpx2 one API request costs about 4 ms of CPU on the target machine (URL
parsing three times, anyio and httpcore layers); the same request over a plain TLS stream costs about
0.3 ms and a third of the latency. The controller sends its writes here (bursts of hundreds of domains,
several writes each) and the kubelet plugin its per-prepare claim reads and node label writes
(docs/architecture.md §6). Built by ``common.connection``, which gives it the same credentials, proxy,
QPS bucket and metrics as the component's lightkube client.

Scope, deliberately small: JSON bodies, ``Content-Length`` or chunked responses, a pool of persistent
connections, at most ``_MAX_CONNECTIONS`` open at once (a request finding a pooled connection closed by
the server is sent on the next or a fresh one), the connection's TLS context, its proxy
(``common.proxy``), and the ``common.credentials`` header (a 401 with a refreshable credential behind it
is sent once more with a fresh one, as client-go does; an exec plugin's new client certificate closes
the pooled connections made with the old one). Failures are the common ``ApiStatusError`` types (401 and
403 retryable, see ``_RETRYABLE_AUTH``); requests are paced by the connection's
``--kube-api-qps``/``--kube-api-burst`` token bucket and recorded in client-go's ``rest_client_*`` families
(``common.restmetrics``), exactly as the lightkube client's are.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import msgspec
from lightkube.config.kubeconfig import SingleConfig
from lightkube.core import resource as lkr

from imexdra.common.kube.client import PermanentApiError, RetryableApiError, is_retryable_status
from imexdra.common.kube.credentials import Credentials
from imexdra.common.kube.proxy import dial
from imexdra.common.kube.restmetrics import RestClientMetrics, server_host
from imexdra.common.observability.logging import REQUEST_LOGGER

_requests_log = logging.getLogger(REQUEST_LOGGER)

#: Retried by the controller although ``is_retryable_status`` calls them permanent: authentication and
#: authorization change without any event that would bring a domain back to the queue. A kube-apiserver
#: that has just restarted answers 403 until its RBAC caches are filled (test_control_plane_faults: a
#: burst of domains reconciled then was dropped until the 10-minute resync); RBAC applied after the
#: controller started, and rotated tokens, are the same. Upstream's controller requeues every error.
_RETRYABLE_AUTH = frozenset({401, 403})
#: Connections open at once; a request beyond them waits for one to come free, as each TLS connection
#: holds asyncio's 256 KiB read buffer and OpenSSL's state (docs/architecture.md §6).
_MAX_CONNECTIONS = 16
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


@dataclass(slots=True)
class _Connection:
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter


class _StaleConnectionError(ConnectionError):
    """A pooled connection was closed by the server before it answered."""


class Transport:
    """Sends requests to one API server over pooled persistent connections."""

    def __init__(
        self,
        config: SingleConfig,
        *,
        tls: ssl.SSLContext | None = None,
        credentials: Credentials | None = None,
        metrics: RestClientMetrics | None = None,
        proxy: str | None = None,
        timeout: float = 30.0,
        user_agent: str = "imexdra",
    ) -> None:
        """Build a transport; components get theirs from ``common.connection``.

        The defaults (own credentials, no QPS limit) serve tests against a plain-HTTP server.
        """
        url = urlsplit(config.cluster.server)
        self._host = url.hostname or "localhost"
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._prefix = url.path.rstrip("/")
        self._ssl = tls
        if url.scheme == "https" and tls is None:
            raise ValueError(f"{config.cluster.server}: an https server needs the connection's TLS context")
        self._credentials = credentials or Credentials(config.user, config.abs_file)
        self._generation = self._credentials.certificate_generation
        self._metrics = metrics or RestClientMetrics(server_host(config.cluster.server))
        self._proxy = proxy
        self._timeout = timeout
        self._user_agent = user_agent
        self._idle: list[_Connection] = []
        self._slots = asyncio.Semaphore(_MAX_CONNECTIONS)

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
        action: str | None = None,
    ) -> Response:
        """Send one request; raise an ``ApiStatusError`` unless the server answers 2xx.

        ``action`` names the request in error messages (e.g. "label node gb200-01"; default the
        method and path); ``body`` is encoded as JSON unless it is ``bytes`` already.
        """
        payload = b"" if body is None else body if isinstance(body, bytes) else msgspec.json.encode(body)
        target = f"{self._prefix}{path}" + (f"?{urlencode(query)}" if query else "")
        action = action or f"{method} {path}"
        kind = content_type if body is not None else None
        status, headers, answer = await self._send(method, target, payload, kind, action)
        if status == 401 and self._credentials.refreshable:
            self._credentials.invalidate()  # a rotated token file, an expired exec token: once more
            status, headers, answer = await self._send(method, target, payload, kind, action)
        if 200 <= status < 300:
            return Response(status, answer)
        raise _status_error(action, status, headers, answer)

    async def _send(
        self, method: str, target: str, payload: bytes, content_type: str | None, action: str
    ) -> tuple[int, dict[str, str], bytes]:
        started = time.monotonic()
        await self._metrics.throttle(method)
        head = self._head(method, target, len(payload), content_type, await self._credentials.header())
        if self._credentials.certificate_generation != self._generation:
            self._generation = self._credentials.certificate_generation
            self.close()  # made with the previous client certificate
        try:
            async with asyncio.timeout(self._timeout), self._slots:
                status, headers, answer = await self._exchange(head + payload)
        except _TRANSPORT_ERRORS as error:
            self._metrics.result(method, None)
            self._metrics.completed(method, time.monotonic() - started, sent=len(payload), received=None)
            raise RetryableApiError(f"{action}: {type(error).__name__}: {error}", code=None) from error
        self._metrics.result(method, status)
        self._metrics.completed(method, time.monotonic() - started, sent=len(payload), received=len(answer))
        _requests_log.info('HTTP Request: %s %s "%d"', method, target, status)  # shown from verbosity 6
        return status, headers, answer

    def _head(
        self, method: str, target: str, length: int, content_type: str | None, authorization: str | None
    ) -> bytes:
        lines = [
            f"{method} {target} HTTP/1.1",
            f"Host: {self._host}:{self._port}",
            f"User-Agent: {self._user_agent}",
            "Accept: application/json",
            f"Content-Length: {length}",
        ]
        if content_type is not None:
            lines.append(f"Content-Type: {content_type}")
        if authorization is not None:
            lines.append(f"Authorization: {authorization}")
        return ("\r\n".join(lines) + "\r\n\r\n").encode()

    async def _exchange(self, message: bytes) -> tuple[int, dict[str, str], bytes]:
        while self._idle:
            try:
                return await self._round_trip(self._idle.pop(), message, reused=True)
            except _StaleConnectionError:
                continue
        return await self._round_trip(await self._connect(), message, reused=False)

    async def _connect(self) -> _Connection:
        if self._proxy is None:
            reader, writer = await asyncio.open_connection(
                self._host, self._port, ssl=self._ssl, server_hostname=self._host if self._ssl else None
            )
            return _Connection(reader, writer)
        reader, writer = await dial(self._proxy, self._host, self._port)
        if self._ssl is not None:
            try:
                await writer.start_tls(self._ssl, server_hostname=self._host)
            except BaseException:
                writer.close()
                raise
        return _Connection(reader, writer)

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
            if keep:
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
