"""A scripted HTTP/1.1 server on 127.0.0.1 for the transport and client unit tests.

Each request gets the next scripted reply; the requests (head and body) and connections are kept for
assertions. Not an API server: it answers whatever bytes a test scripts, to check what our transport
sends and how it reads framing, errors and closed connections.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from imexdra.common.kube.kubeconfig import Cluster, Context, SingleConfig, User

Reply = Callable[[bytes], bytes]
"""Builds the bytes to answer from the request's bytes; empty bytes close without answering."""


@dataclass
class ScriptedServer:
    """Answers each request with the next of ``replies``; records requests and connections."""

    replies: list[Reply] = field(default_factory=list)
    requests: list[bytes] = field(default_factory=list)
    connections: int = 0
    port: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Serve one connection until the script runs out, a reply closes it, or the client does."""
        self.connections += 1
        while self.replies:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                break
            length = next(
                (
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                ),
                0,
            )
            request = head + await reader.readexactly(length)
            self.requests.append(request)
            answer = self.replies.pop(0)(request)
            if not answer:
                break
            writer.write(answer)
            await writer.drain()
            if b"Connection: close" in answer:
                break
        writer.close()

    def request_line(self, index: int) -> str:
        """The request line of request ``index`` ("GET /path HTTP/1.1")."""
        return self.requests[index].split(b"\r\n", 1)[0].decode()

    def body(self, index: int) -> bytes:
        """The body of request ``index``."""
        return self.requests[index].split(b"\r\n\r\n", 1)[1]

    def kubeconfig(self, user: User | None = None) -> SingleConfig:
        """A kubeconfig context pointing at this server over plain HTTP."""
        return local_kubeconfig(self.port, user)


def local_kubeconfig(port: int, user: User | None = None) -> SingleConfig:
    """A kubeconfig context for ``http://127.0.0.1:<port>``."""
    return SingleConfig(
        context_name="t",
        context=Context(cluster="c"),
        cluster=Cluster(server=f"http://127.0.0.1:{port}"),
        user=user,
    )


@asynccontextmanager
async def serving(
    handle: Callable[[asyncio.StreamReader, asyncio.StreamWriter], object],
) -> AsyncIterator[int]:
    """Listen on a free port of 127.0.0.1 with ``handle`` per connection; yields the port."""
    listener = await asyncio.start_server(handle, "127.0.0.1", 0)  # type: ignore[arg-type]
    try:
        yield listener.sockets[0].getsockname()[1]
    finally:
        listener.close()


def reply(status: int, body: bytes = b"{}", *extra: str) -> Reply:
    """A ``status`` answer with a Content-Length ``body`` and ``extra`` header lines."""

    def answer(_: bytes) -> bytes:
        headers = [f"HTTP/1.1 {status} X", f"Content-Length: {len(body)}", *extra]
        return ("\r\n".join(headers) + "\r\n\r\n").encode() + body

    return answer


def chunked(*parts: bytes, status: int = 200) -> Reply:
    """A ``status`` answer whose body is sent in the chunks ``parts``."""

    def answer(_: bytes) -> bytes:
        body = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"
        return b"HTTP/1.1 %d X\r\nTransfer-Encoding: chunked\r\n\r\n" % status + body

    return answer


def close_without_answer(_: bytes) -> bytes:
    """Close the connection instead of answering."""
    return b""
