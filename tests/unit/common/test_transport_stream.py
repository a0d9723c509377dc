"""The lean transport's streaming GET (watches): lines across chunks, errors, 401, dead connections.

Each test scripts a local HTTP server as a coroutine that reads one request head and writes raw bytes,
so chunk boundaries and silences are exactly what the test says.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from imexdra.common.kube import http11
from imexdra.common.kube.client import PermanentApiError, RetryableApiError
from imexdra.common.kube.kubeconfig import User
from imexdra.common.kube.transport import Transport
from tests.support.httpscript import local_kubeconfig, serving

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"


class Scripted:
    """A server running ``script`` on every connection; counts connections and keeps request heads."""

    def __init__(self) -> None:
        self.script: Script | None = None
        self.heads: list[bytes] = []
        self.port = 0
        self.closed = asyncio.Event()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        assert self.script is not None
        try:
            await self.script(reader, writer)
        finally:
            writer.close()
            self.closed.set()

    async def head(self, reader: asyncio.StreamReader) -> bytes:
        head = await reader.readuntil(b"\r\n\r\n")
        self.heads.append(head)
        return head

    def transport(self, user: User | None = None, timeout: float = 30.0) -> Transport:
        return Transport(local_kubeconfig(self.port, user), timeout=timeout)


@pytest.fixture
async def server() -> AsyncIterator[Scripted]:
    scripted = Scripted()
    async with serving(scripted.handle) as scripted.port:
        yield scripted


async def collect(transport: Transport, path: str = "/api/v1/pods", **kwargs: object) -> list[bytes]:
    async with transport.stream(path, **kwargs) as lines:  # type: ignore[arg-type]
        return [line async for line in lines]


async def test_events_split_across_chunks_arrive_as_whole_lines(server: Scripted) -> None:
    """A line split over three chunks, and two lines in one chunk, arrive as three whole lines."""

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.head(reader)
        parts = [b'{"type":"AD', b'DED","n":', b'1}\n{"type":"A"}\n{"type":"B"}\n', b""]
        writer.write(CHUNKED_HEAD + b"".join(chunk(p) for p in parts[:-1]) + b"0\r\n\r\n")
        await writer.drain()

    server.script = script
    lines = await collect(server.transport(User(token="t0k")), query={"watch": "true"})
    assert lines == [b'{"type":"ADDED","n":1}', b'{"type":"A"}', b'{"type":"B"}']
    assert server.heads[0].startswith(b"GET /api/v1/pods?watch=true HTTP/1.1\r\n")
    assert b"Authorization: Bearer t0k\r\n" in server.heads[0]


async def test_lines_arrive_before_the_stream_ends(server: Scripted) -> None:
    """The first event is delivered while the server is still holding the stream open."""
    release = asyncio.Event()

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.head(reader)
        writer.write(CHUNKED_HEAD + chunk(b'{"n":1}\n'))
        await writer.drain()
        await release.wait()
        writer.write(chunk(b'{"n":2}\n') + b"0\r\n\r\n")
        await writer.drain()

    server.script = script
    async with server.transport().stream("/w") as lines:
        iterator = aiter(lines)
        assert await anext(iterator) == b'{"n":1}'
        release.set()
        assert await anext(iterator) == b'{"n":2}'
        with pytest.raises(StopAsyncIteration):
            await anext(iterator)


@pytest.mark.parametrize(
    ("status", "error"),
    [(410, RetryableApiError), (403, PermanentApiError), (404, PermanentApiError)],
    ids=["gone", "forbidden", "not-found"],
)
async def test_an_error_status_raises_with_the_server_s_reason(
    server: Scripted, status: int, error: type[Exception]
) -> None:
    """A non-2xx answer to a watch raises the common error type with code, reason and message."""
    body = b'{"kind":"Status","reason":"Expired","message":"too old resource version: 1 (9)"}'

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.head(reader)
        writer.write(b"HTTP/1.1 %d X\r\nContent-Length: %d\r\n\r\n%s" % (status, len(body), body))
        await writer.drain()

    server.script = script
    with pytest.raises(error) as raised:
        await collect(server.transport(), action="watch Pod")
    assert str(raised.value) == f"watch Pod: {status} Expired: too old resource version: 1 (9)"
    assert getattr(raised.value, "code", None) == status


async def test_a_401_is_retried_once_with_a_fresh_token(server: Scripted, tmp_path: Path) -> None:
    """A 401 on a watch re-reads the token file and opens the stream again with the new token."""
    token = tmp_path / "token"
    token.write_text("old")

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await server.head(reader)
        if b"Bearer old" in head:
            token.write_text("new")
            writer.write(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 2\r\n\r\n{}")
        else:
            writer.write(CHUNKED_HEAD + chunk(b'{"ok":1}\n') + b"0\r\n\r\n")
        await writer.drain()

    server.script = script
    assert await collect(server.transport(User(token_file=str(token)))) == [b'{"ok":1}']
    assert [b"Bearer new" in head for head in server.heads] == [False, True]


async def test_a_silent_connection_ends_the_stream_with_a_retryable_error(server: Scripted) -> None:
    """No byte within ``read_timeout`` is a dead connection: a retryable error, and the socket closed."""
    stop = asyncio.Event()

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.head(reader)
        writer.write(CHUNKED_HEAD + chunk(b'{"n":1}\n'))
        await writer.drain()
        await reader.read()  # until the client closes
        stop.set()

    server.script = script
    seen: list[bytes] = []
    with pytest.raises(RetryableApiError, match="TimeoutError"):
        async with server.transport().stream("/w", read_timeout=0.2) as lines:
            async for line in lines:
                seen.append(line)
    assert seen == [b'{"n":1}']
    await asyncio.wait_for(stop.wait(), 5)


async def test_a_watch_is_counted_but_not_timed(server: Scripted) -> None:
    """The response code lands in rest_client_requests_total; request duration has no watch sample."""

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await server.head(reader)
        writer.write(CHUNKED_HEAD + b"0\r\n\r\n")
        await writer.drain()

    server.script = script
    host = f"127.0.0.1:{server.port}"
    labels = {"code": "200", "method": "GET", "host": host}
    before = REGISTRY.get_sample_value("rest_client_requests_total", labels) or 0.0
    await collect(server.transport())
    assert REGISTRY.get_sample_value("rest_client_requests_total", labels) == before + 1
    timed = REGISTRY.get_sample_value(
        "rest_client_request_duration_seconds_count", {"verb": "GET", "host": host}
    )
    assert timed is None


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        ([b"a\nb", b"c\n"], [b"a", b"bc"]),
        ([b"\n\n", b"x"], [b"x"]),
        ([b"one\r\n", b"two\r\n"], [b"one", b"two"]),
        ([b"x" * 5, b"y" * 5, b"\n"], [b"xxxxxyyyyy"]),
    ],
    ids=["split", "blank-lines-and-no-final-newline", "crlf", "three-chunks-one-line"],
)
async def test_lines_are_cut_at_newlines_only(chunks: list[bytes], expected: list[bytes]) -> None:
    """``http11.lines`` joins chunks and cuts at newlines, dropping blank lines."""

    async def source() -> AsyncIterator[bytes]:
        for piece in chunks:
            yield piece

    assert [line async for line in http11.lines(source())] == expected


async def test_a_watch_takes_the_connection_its_list_gave_back(server: Scripted) -> None:
    """A LIST then its WATCH, as an informer sends them: both go over one connection, which the watch
    takes out of the pool, so the next request dials a connection of its own."""
    connections: list[int] = []

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(len(connections))
        while (head := await server.head(reader)) and b"watch=true" not in head:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
            await writer.drain()
        writer.write(CHUNKED_HEAD + chunk(b'{"type":"ADDED"}\n') + b"0\r\n\r\n")
        await writer.drain()
        await reader.read()  # until the client closes the stream's connection

    server.script = script
    transport = server.transport()
    await transport.request("GET", "/api/v1/pods")
    assert await collect(transport, query={"watch": "true"}) == [b'{"type":"ADDED"}']
    assert len(connections) == 1
    await transport.request("GET", "/api/v1/pods")
    assert len(connections) == 2  # the stream's connection was closed with it, not pooled again
    transport.close()


async def test_a_watch_on_a_pooled_connection_the_server_dropped_dials_anew(server: Scripted) -> None:
    """An idle pooled connection the server closed meanwhile is not the watch's end: it goes out on a
    fresh connection."""
    connections: list[int] = []

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(len(connections))
        head = await server.head(reader)
        if b"watch=true" not in head:  # answer the LIST, then drop the connection while it is idle
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
            await writer.drain()
            return
        writer.write(CHUNKED_HEAD + chunk(b'{"n":1}\n') + b"0\r\n\r\n")
        await writer.drain()

    server.script = script
    transport = server.transport()
    await transport.request("GET", "/api/v1/pods")
    await server.closed.wait()
    assert await collect(transport, query={"watch": "true"}) == [b'{"n":1}']
    assert len(connections) == 2
