"""The fake IMEX wire format: one JSON object per line, one request and one answer per connection.

Used between fake daemons (the peer ``hello``) and between ``ctl`` and a daemon's command service
(``status``). Real IMEX speaks gRPC; only the fact that peers must reach each other at the addresses
and ports in the config matters to the driver, so the payload is kept trivially simple. The client
here is blocking on purpose: ``nvidia-imex-ctl`` runs as a probe and must start fast (no asyncio).
"""

from __future__ import annotations

import json
import socket
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import asyncio

Message = dict[str, Any]
#: Where a command service listens: ``("unix", path)`` or ``(host, port)``.
Target = tuple[str, str | int]


class ProtocolError(Exception):
    """The other side answered with something that is not a JSON object line."""


def encode(message: Message) -> bytes:
    """One message as a JSON line."""
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def decode(line: bytes) -> Message:
    """One JSON object line."""
    if not line:
        raise ProtocolError("connection closed without an answer")
    try:
        message = json.loads(line)
    except ValueError as error:
        raise ProtocolError(f"not JSON: {line[:80]!r}") from error
    if not isinstance(message, dict):
        raise ProtocolError(f"not a JSON object: {line[:80]!r}")
    return message


async def read_message(reader: asyncio.StreamReader) -> Message:
    """Read one JSON object line from a stream."""
    return decode(await reader.readline())


def request(target: Target, message: Message, *, within: float) -> Message:
    """Send ``message`` to ``target`` and return the answer (raises ``OSError`` or ``ProtocolError``)."""
    where, port = target
    if where == "unix":
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(within)
        address: Any = str(port)
    else:
        family = socket.AF_INET6 if ":" in where else socket.AF_INET
        conn = socket.socket(family, socket.SOCK_STREAM)
        conn.settimeout(within)
        address = (where, int(port))
    with conn:
        conn.connect(address)
        conn.sendall(encode(message))
        with conn.makefile("rb") as answer:
            return decode(answer.readline())
