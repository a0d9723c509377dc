"""One grpclib server on one listening socket, stopped hard: the plumbing under the plugin's three servers.

The plugin serves gRPC with grpclib, pure asyncio HTTP/2 on the process's one event loop, not grpcio:
grpcio's C core keeps threads of its own busy while idle and costs about 10 MiB of RSS on import
(docs/architecture.md §7, bench/README.md "kubelet plugin").

``GrpcServer`` adds what grpclib's ``Server`` lacks and grpcio's ``stop(None)`` did:

- ``stop()`` closes every open HTTP/2 connection, not only the listener. grpclib's ``close()``
  cancels running calls but leaves connections open, so a kubelet that still holds one would keep
  calling a plugin that has stopped; after ours the kubelet's client sees the connection go and
  reconnects to whatever serves the socket path next.
- TCP listening on ``[::]`` is one dual-stack socket (asyncio makes IPv6 sockets v6-only), with a
  fallback to ``0.0.0.0`` where the host has no IPv6; ``port`` 0 picks one free port for both.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from grpclib.const import Status
from grpclib.encoding.base import CodecBase
from grpclib.exceptions import GRPCError
from grpclib.protocol import H2Protocol
from grpclib.server import Server, Stream

if TYPE_CHECKING:
    from grpclib._typing import IServable

LISTEN_BACKLOG = 100

_Request = TypeVar("_Request")
_Reply = TypeVar("_Reply")


async def unary_request(stream: Stream[_Request, _Reply]) -> _Request:
    """The one request message of a unary call (an empty message still arrives as one)."""
    request = await stream.recv_message()
    if request is None:
        raise GRPCError(Status.INTERNAL, "the call carried no request message")
    return request


class _TrackingServer(Server):
    """grpclib's ``Server`` remembering its connections, so a stop can close them."""

    def __init__(self, handlers: Collection[IServable], codec: CodecBase | None) -> None:
        super().__init__(handlers, codec=codec)
        self.connections: set[H2Protocol] = set()

    def _protocol_factory(self) -> H2Protocol:
        # grpclib 0.4.9 (pinned) makes one H2Protocol per accepted connection here. Closed ones are
        # dropped as new ones come: the health check opens two connections per probe.
        self.connections = {p for p in self.connections if not _closed(p)}
        protocol = super()._protocol_factory()
        self.connections.add(protocol)
        return protocol


def _closed(protocol: H2Protocol) -> bool:
    # A connection that never finished its handshake has no ``connection`` yet.
    connection = getattr(protocol, "connection", None)
    return connection is not None and connection.is_closing()


class GrpcServer:
    """Serve ``handlers`` on a unix socket (``start_unix``) or a TCP port (``start_tcp``)."""

    def __init__(self, handlers: Collection[IServable], *, codec: CodecBase | None = None) -> None:
        self._server = _TrackingServer(handlers, codec)
        self._started = False

    async def start_unix(self, path: Path) -> None:
        """Listen on the unix socket ``path`` (which must not exist)."""
        await self._server.start(path=str(path), backlog=LISTEN_BACKLOG)
        self._started = True

    async def start_tcp(self, host: str | None, port: int) -> int:
        """Listen on ``host:port`` (every interface when ``host`` is None); return the bound port."""
        sock = _tcp_socket(host, port)
        try:
            await self._server.start(sock=sock, backlog=LISTEN_BACKLOG)
        except BaseException:
            sock.close()
            raise
        self._started = True
        return int(sock.getsockname()[1])

    async def stop(self) -> None:
        """Stop listening, cancel running calls, close every connection. Idempotent."""
        if not self._started:
            return
        self._started = False
        self._server.close()
        for protocol in self._server.connections:
            connection = getattr(protocol, "connection", None)  # see _closed
            if connection is not None and not connection.is_closing():
                connection.close()
        self._server.connections.clear()
        await self._server.wait_closed()


def _tcp_socket(host: str | None, port: int) -> socket.socket:
    if host is not None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        return _bound(family, (host, port))
    with contextlib.suppress(OSError):
        return _bound(socket.AF_INET6, ("::", port), dual_stack=True)
    return _bound(socket.AF_INET, ("0.0.0.0", port))  # noqa: S104 - every interface is what was asked


def _bound(
    family: socket.AddressFamily, address: tuple[str, int], *, dual_stack: bool = False
) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if dual_stack:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(address)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock
