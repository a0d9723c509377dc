"""The one HTTP/1.1 keep-alive transport to the API server: every request and watch of a component.

Why our own: through a general-purpose client on httpx one API request cost about 4 ms of CPU on the target
machine (URL parsing three times, anyio and httpcore layers); over a plain TLS stream about 0.3 ms and a
third of the latency; the transport benchmark (docs/kube-client.md) compares it with aiohttp. The typed
client (``common.kube.kubeclient``) sits on it; ``common.kube.connection`` builds it with the
component's credentials, proxy, QPS bucket and metrics.

Scope, deliberately small: JSON bodies, ``Content-Length``, chunked or connection-framed responses, a
pool of persistent connections, at most ``_MAX_CONNECTIONS`` open at once (a request finding a pooled
connection closed by the server is sent on the next or a fresh one), streamed GETs for watches on
connections of their own (:meth:`Transport.stream`), the connection's TLS context, its proxy
(``common.kube.proxy``), and the ``common.kube.credentials`` header (a 401 with a refreshable credential
behind it is sent once more with a fresh one, as client-go does; an exec plugin's new client certificate
closes the connections made with the old one, watches included). Failures are the common
``ApiStatusError`` types, classified by ``is_retryable_status`` alone (401 and 403 are permanent, as in
client-go; a component that must retry them says so, docs/errors.md §2); requests are paced by the
connection's ``--kube-api-qps``/``--kube-api-burst`` token bucket and recorded in client-go's
``rest_client_*`` families (``common.kube.restmetrics``); watches are counted, neither paced nor timed.
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import logging
import ssl
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import msgspec

from imexdra.common.kube import http11
from imexdra.common.kube.client import PermanentApiError, RetryableApiError, is_retryable_status
from imexdra.common.kube.credentials import Credentials
from imexdra.common.kube.http11 import Head
from imexdra.common.kube.kubeconfig import SingleConfig
from imexdra.common.kube.proxy import dial
from imexdra.common.kube.resource import api_info
from imexdra.common.kube.restmetrics import RestClientMetrics, server_host
from imexdra.common.observability.logging import REQUEST_LOGGER

_requests_log = logging.getLogger(REQUEST_LOGGER)

#: Connections open at once; a request beyond them waits for one to come free, as each TLS connection
#: holds asyncio's read buffer and OpenSSL's state (docs/architecture.md §6).
_MAX_CONNECTIONS = 16
#: asyncio's TLS read buffer per connection (``SSLProtocol.max_size``). Python 3.11 allocates and zeroes
#: 256 KiB per connection at connect, resident for the connection's life: about 290 KiB per TLS
#: connection in all: 3.5 MiB of an idle controller's watches and pooled connections. A TLS record
#: carries at most 16 KiB, so 32 KiB still takes two records per read; the whole connection then holds
#: about 65 KiB (bench/README.md, "Controller side by side with upstream v0.5.0").
TLS_READ_BUFFER = 32 * 1024
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


@dataclass(eq=False, slots=True)
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
        """Build a transport; components get theirs from ``common.kube.connection``.

        The defaults (own credentials, no QPS limit) serve tests against a plain-HTTP server.
        """
        url = urlsplit(config.cluster.server)
        self._host = url.hostname or "localhost"
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._prefix = url.path.rstrip("/")
        self._ssl = tls
        if url.scheme == "https" and tls is None:
            raise ValueError(f"{config.cluster.server}: an https server needs the connection's TLS context")
        if tls is not None:
            bound_tls_read_buffer()
        self._credentials = credentials or Credentials(config.user, config.abs_file)
        self._generation = self._credentials.certificate_generation
        self._metrics = metrics or RestClientMetrics(server_host(config.cluster.server))
        self._proxy = proxy
        self._timeout = timeout
        self._user_agent = user_agent
        self._authority = f"{self._host}:{self._port}"
        self._idle: list[_Connection] = []
        self._streams: set[_Connection] = set()  # open watches, closed when the client certificate changes
        self._slots = asyncio.Semaphore(_MAX_CONNECTIONS)

    def close(self) -> None:
        """Close every pooled connection (open streams end when their blocks are left)."""
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

    @asynccontextmanager
    async def stream(
        self,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        action: str | None = None,
        read_timeout: float | None = None,
    ) -> AsyncIterator[AsyncIterator[bytes]]:
        """GET ``path`` and yield its body as lines, as they arrive (a WATCH: one JSON event a line).

        Raises an ``ApiStatusError`` unless the server answers 2xx (a 401 with a refreshable credential
        is sent once more). The stream has a connection of its own, outside the pool and its bound, as
        it stays open for minutes (an idle pooled one is taken out of the pool for it, if there is
        one); leaving the block closes it. It is neither paced by the QPS bucket
        nor timed, as client-go's watches are not; its response code is counted. Each read waits at
        most ``read_timeout`` seconds (None: no bound), which detects a silently dead connection.
        """
        target = f"{self._prefix}{path}" + (f"?{urlencode(query)}" if query else "")
        action = action or f"GET {path}"
        connection, head = await self._open_stream(target, action)
        if head.status == 401 and self._credentials.refreshable:
            self._forget(connection)
            self._credentials.invalidate()
            connection, head = await self._open_stream(target, action)
        try:
            if not 200 <= head.status < 300:
                try:
                    async with asyncio.timeout(self._timeout):
                        answer = await http11.read_body(connection.reader, head)
                except _TRANSPORT_ERRORS as error:
                    raise _transport_error(action, error) from error
                raise _status_error(action, head.status, head.headers, answer)
            yield self._lines(connection, head, action, read_timeout)
        finally:
            self._forget(connection)

    async def _lines(
        self, connection: _Connection, head: Head, action: str, read_timeout: float | None
    ) -> AsyncIterator[bytes]:
        try:
            async for line in http11.lines(
                http11.body_chunks(connection.reader, head, read_timeout=read_timeout)
            ):
                yield line
        except _TRANSPORT_ERRORS as error:
            raise _transport_error(action, error) from error

    async def _open_stream(self, target: str, action: str) -> tuple[_Connection, Head]:
        head = self._head("GET", target, 0, None, await self._credentials.header())
        self._check_certificate()
        try:
            async with asyncio.timeout(self._timeout):
                connection, answer = await self._start_stream(head)
        except _TRANSPORT_ERRORS as error:
            self._metrics.result("GET", None)
            raise _transport_error(action, error) from error
        self._metrics.result("GET", answer.status)
        _requests_log.info('HTTP Request: GET %s "%d"', target, answer.status)  # shown from verbosity 6
        return connection, answer

    async def _start_stream(self, head: bytes) -> tuple[_Connection, Head]:
        """Send a streamed GET on an idle pooled connection if there is one, else on a new connection.

        A taken connection leaves the pool for the stream's life. An informer's WATCH follows its LIST,
        so at start each watch takes the connection a LIST just gave back, instead of dialing and
        holding one more TLS connection beside it (bench/README.md, the controller's idle RSS).
        """
        while self._idle:
            try:
                return await self._stream_on(self._idle.pop(), head, reused=True)
            except _StaleConnectionError:
                continue
        return await self._stream_on(await self._connect(), head, reused=False)

    async def _stream_on(
        self, connection: _Connection, head: bytes, *, reused: bool
    ) -> tuple[_Connection, Head]:
        self._streams.add(connection)
        try:
            return connection, await _send_for_head(connection, head, reused=reused)
        except BaseException:
            self._forget(connection)
            raise

    def _forget(self, connection: _Connection) -> None:
        self._streams.discard(connection)
        connection.writer.close()

    def _check_certificate(self) -> None:
        if self._credentials.certificate_generation != self._generation:
            # An exec plugin's new client certificate: connections made with the old one are closed,
            # watches included (their informers resume), as client-go does.
            self._generation = self._credentials.certificate_generation
            self.close()
            for stream in list(self._streams):
                self._forget(stream)

    async def _send(
        self, method: str, target: str, payload: bytes, content_type: str | None, action: str
    ) -> tuple[int, Mapping[str, str], bytes]:
        started = time.monotonic()
        await self._metrics.throttle(method)
        head = self._head(method, target, len(payload), content_type, await self._credentials.header())
        self._check_certificate()
        try:
            async with asyncio.timeout(self._timeout), self._slots:
                status, headers, answer = await self._exchange(head + payload)
        except _TRANSPORT_ERRORS as error:
            self._metrics.result(method, None)
            self._metrics.completed(method, time.monotonic() - started, sent=len(payload), received=None)
            raise _transport_error(action, error) from error
        self._metrics.result(method, status)
        self._metrics.completed(method, time.monotonic() - started, sent=len(payload), received=len(answer))
        _requests_log.info('HTTP Request: %s %s "%d"', method, target, status)  # shown from verbosity 6
        return status, headers, answer

    def _head(
        self, method: str, target: str, length: int, content_type: str | None, authorization: str | None
    ) -> bytes:
        extra = {}
        if content_type is not None:
            extra["Content-Type"] = content_type
        if authorization is not None:
            extra["Authorization"] = authorization
        return http11.request_head(
            method, target, authority=self._authority, user_agent=self._user_agent, length=length, extra=extra
        )

    async def _exchange(self, message: bytes) -> tuple[int, Mapping[str, str], bytes]:
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
    ) -> tuple[int, Mapping[str, str], bytes]:
        keep = False
        try:
            head = await _send_for_head(connection, message, reused=reused)
            body = await http11.read_body(connection.reader, head)
            keep = head.keep_alive and head.framed
            return head.status, head.headers, body
        finally:
            if keep:
                self._idle.append(connection)
            else:
                connection.writer.close()


async def _send_for_head(connection: _Connection, message: bytes, *, reused: bool) -> Head:
    """Send ``message`` and read the response's head; a pooled connection found closed is stale."""
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
    return await http11.read_head(connection.reader, status_line)


def bound_tls_read_buffer() -> None:
    """Make asyncio's TLS connections read into ``TLS_READ_BUFFER`` bytes, not 256 KiB.

    The size is a class attribute of asyncio's TLS protocol, so it holds for every TLS connection of
    the process; ours are the API server's (and its proxy's). Never raised: a smaller one set
    elsewhere is kept.
    """
    if asyncio.sslproto.SSLProtocol.max_size > TLS_READ_BUFFER:
        asyncio.sslproto.SSLProtocol.max_size = TLS_READ_BUFFER


def _transport_error(action: str, error: BaseException) -> RetryableApiError:
    """No (complete) response: refused, reset, timed out, malformed."""
    return RetryableApiError(f"{action}: {type(error).__name__}: {error}", code=None, action=action)


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
    if is_retryable_status(status):
        retry_after = headers.get("retry-after", "")
        wait = float(retry_after) if retry_after.isdigit() else None
        return RetryableApiError(message, code=status, reason=decoded.reason, retry_after=wait, action=action)
    return PermanentApiError(message, code=status, reason=decoded.reason, action=action)


def resource_path(res: type[Any], name: str | None = None, *, namespace: str | None = None) -> str:
    """URL path of a kind's collection, or of one object and the subresource its class stands for."""
    info = api_info(res)
    group, version = info.group, info.version
    path = f"/apis/{group}/{version}" if group else f"/api/{version}"
    if namespace:
        path += f"/namespaces/{quote(namespace, safe='')}"
    path += f"/{info.plural}"
    if name is not None:
        path += f"/{quote(name, safe='')}"
        if info.subresource:
            path += f"/{info.subresource}"
    return path
