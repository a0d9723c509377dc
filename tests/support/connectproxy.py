"""A minimal proxy for tests of the API clients' proxy support: HTTP CONNECT (plain or over TLS) or SOCKS5.

It opens the tunnel its client asks for and pipes bytes both ways (the API server's TLS passes through
untouched), recording each target and the credentials the client offered (``Proxy-Authorization`` for
CONNECT, ``user:password`` for SOCKS5); ``refuse`` makes it refuse every tunnel instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import struct
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from imexdra_sim.localcluster.pki import ClusterPKI


@dataclass
class ConnectProxy:
    """What the proxy saw; ``url`` is its ``<scheme>://127.0.0.1:port``."""

    scheme: str = "http"
    url: str = ""
    targets: list[str] = field(default_factory=list)
    authorizations: list[str | None] = field(default_factory=list)
    refuse: bool = False

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            target = await (
                self._socks5(reader, writer) if self.scheme == "socks5" else self._connect(reader, writer)
            )
        except (asyncio.IncompleteReadError, ConnectionError):
            target = None
        if target is None:
            writer.close()
            return
        host, port = target
        upstream_reader, upstream_writer = await asyncio.open_connection(host, port)
        await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))

    async def _connect(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[str, int] | None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        method, target, _ = head[0].split(" ", 2)
        headers = dict(line.split(": ", 1) for line in head[1:] if ": " in line)
        self.targets.append(target)
        self.authorizations.append(headers.get("Proxy-Authorization"))
        if method != "CONNECT" or self.refuse:
            writer.write(b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
            return None
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
        host, _, port = target.rpartition(":")
        return host, int(port)

    async def _socks5(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> tuple[str, int] | None:
        """RFC 1928 with RFC 1929 username/password; only CONNECT."""
        _, count = await reader.readexactly(2)
        methods = await reader.readexactly(count)
        method = 2 if 2 in methods else 0
        writer.write(bytes([5, method]))
        credentials = None
        if method == 2:
            _, size = await reader.readexactly(2)
            user = await reader.readexactly(size)
            (size,) = await reader.readexactly(1)
            password = await reader.readexactly(size)
            credentials = f"{user.decode()}:{password.decode()}"
            writer.write(bytes([1, 0]))
        _, command, _, kind = await reader.readexactly(4)
        if kind == 3:  # a domain name
            (size,) = await reader.readexactly(1)
            host = (await reader.readexactly(size)).decode()
        else:
            host = ".".join(str(b) for b in await reader.readexactly(4))
        (port,) = struct.unpack("!H", await reader.readexactly(2))
        self.targets.append(f"{host}:{port}")
        self.authorizations.append(credentials)
        refused = self.refuse or command != 1
        writer.write(bytes([5, 2 if refused else 0, 0, 1, 0, 0, 0, 0, 0, 0]))
        await writer.drain()
        return None if refused else (host, port)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, ssl.SSLError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()


@contextlib.asynccontextmanager
async def connect_proxy(scheme: str = "http", *, pki: Path | None = None) -> AsyncIterator[ConnectProxy]:
    """A running proxy on a free loopback port.

    ``scheme`` is ``http``, ``socks5`` or ``https``; an https proxy serves a certificate for 127.0.0.1
    issued by a CA written to ``pki/ca.crt`` (trust it with ``SSL_CERT_FILE``).
    """
    proxy = ConnectProxy(scheme=scheme)
    tls = None
    if scheme == "https":
        if pki is None:
            raise ValueError("an https proxy needs a directory for its certificates")
        authority = ClusterPKI(pki)
        serving = authority.issue("proxy", common_name="proxy", ip_addresses=("127.0.0.1",), server=True)
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(serving.cert, serving.key)
    server = await asyncio.start_server(proxy.handle, "127.0.0.1", 0, ssl=tls)
    proxy.url = f"{scheme}://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        yield proxy
    finally:
        server.close()
