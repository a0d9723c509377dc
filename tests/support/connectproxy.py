"""A minimal HTTP CONNECT proxy for tests of the API clients' proxy support.

It answers ``CONNECT host:port`` with 200 and pipes bytes both ways (TLS passes through untouched), and
records each CONNECT target and ``Proxy-Authorization`` header; ``refuse`` makes it answer 407 instead.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field


@dataclass
class ConnectProxy:
    """What the proxy saw; ``url`` is its ``http://127.0.0.1:port``."""

    url: str = ""
    targets: list[str] = field(default_factory=list)
    authorizations: list[str | None] = field(default_factory=list)
    refuse: bool = False

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        method, target, _ = head[0].split(" ", 2)
        headers = dict(line.split(": ", 1) for line in head[1:] if ": " in line)
        self.targets.append(target)
        self.authorizations.append(headers.get("Proxy-Authorization"))
        if method != "CONNECT" or self.refuse:
            writer.write(b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")
            writer.close()
            return
        host, _, port = target.rpartition(":")
        upstream_reader, upstream_writer = await asyncio.open_connection(host, int(port))
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()


@contextlib.asynccontextmanager
async def connect_proxy() -> AsyncIterator[ConnectProxy]:
    """A running proxy on a free loopback port."""
    proxy = ConnectProxy()
    server = await asyncio.start_server(proxy.handle, "127.0.0.1", 0)
    proxy.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        yield proxy
    finally:
        server.close()
