"""HTTP/1.1 on the wire, as the API server speaks it to ``common.kube.transport``: heads, bodies, lines.

What a Kubernetes API server sends is narrow: a status line, headers, then a body framed by
``Content-Length`` or ``Transfer-Encoding: chunked``, or (an old proxy's reply) read to the end of the
connection. A WATCH is a chunked body that never ends on its own: one JSON event per line, the line
split across chunks at the server's whim (docs/kube-client.md). This module reads exactly that, and
knows nothing of pooling, credentials or metrics.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

#: Largest piece read at once from a body framed by Content-Length or by the connection's end.
_READ_SIZE = 65536


@dataclass(frozen=True, slots=True)
class Head:
    """A response's status and headers (names lower-cased)."""

    status: int
    headers: Mapping[str, str]

    @property
    def framed(self) -> bool:
        """Whether the body's end is known without closing the connection (an empty body included)."""
        return self.empty or "content-length" in self.headers or "transfer-encoding" in self.headers

    @property
    def empty(self) -> bool:
        """Whether the status forbids a body (1xx, 204 No Content, 304 Not Modified)."""
        return self.status < 200 or self.status in (204, 304)

    @property
    def keep_alive(self) -> bool:
        """Whether the connection may carry another request once the body is read."""
        return self.headers.get("connection", "").lower() != "close"


def request_head(
    method: str, target: str, *, authority: str, user_agent: str, length: int, extra: Mapping[str, str]
) -> bytes:
    """The request line and headers of one request whose body is ``length`` bytes."""
    lines = [
        f"{method} {target} HTTP/1.1",
        f"Host: {authority}",
        f"User-Agent: {user_agent}",
        "Accept: application/json",
        f"Content-Length: {length}",
        *(f"{name}: {value}" for name, value in extra.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def read_head(reader: asyncio.StreamReader, status_line: bytes) -> Head:
    """The rest of a response head whose status line has been read already."""
    parts = status_line.split(None, 2)
    if len(parts) < 2 or not parts[1].isdigit():
        raise ValueError(f"malformed status line {status_line[:80]!r}")
    headers: dict[str, str] = {}
    while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    return Head(int(parts[1]), headers)


async def body_chunks(
    reader: asyncio.StreamReader, head: Head, *, read_timeout: float | None = None
) -> AsyncIterator[bytes]:
    """The body's bytes as they arrive; each read waits at most ``read_timeout`` seconds (None: no bound).

    The bound is per read, not for the whole body: a watch may last minutes, but a connection that
    delivers nothing for longer than the server's own deadline is dead.
    """
    if head.empty:
        return
    encoding = head.headers.get("transfer-encoding", "").lower()
    if encoding == "chunked":
        while True:
            async with asyncio.timeout(read_timeout):
                size = int((await reader.readline()).split(b";", 1)[0].strip(), 16)
                if not size:
                    break
                chunk = await reader.readexactly(size)
                await reader.readexactly(2)  # the CRLF closing the chunk
            yield chunk
        async with asyncio.timeout(read_timeout):
            while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                pass  # trailers
        return
    if "content-length" in head.headers:
        left = int(head.headers["content-length"])
        while left:
            async with asyncio.timeout(read_timeout):
                chunk = await reader.readexactly(min(left, _READ_SIZE))
            left -= len(chunk)
            yield chunk
        return
    while True:  # framed by the end of the connection
        async with asyncio.timeout(read_timeout):
            chunk = await reader.read(_READ_SIZE)
        if not chunk:
            return
        yield chunk


async def read_body(reader: asyncio.StreamReader, head: Head) -> bytes:
    """The whole body (the caller bounds the time)."""
    if head.empty:
        return b""
    if "content-length" in head.headers and "transfer-encoding" not in head.headers:
        return await reader.readexactly(int(head.headers["content-length"]))
    return b"".join([chunk async for chunk in body_chunks(reader, head)])


async def lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The non-empty lines of a byte stream, however its chunks split them (a watch's events)."""
    pending = bytearray()
    async for chunk in chunks:
        scanned = len(pending)  # the bytes before this chunk hold no newline
        pending += chunk
        start = 0
        while (end := pending.find(b"\n", scanned)) >= 0:
            line = bytes(pending[start:end]).strip()
            if line:
                yield line
            start = scanned = end + 1
        del pending[:start]
    if pending.strip():
        yield bytes(pending).strip()
