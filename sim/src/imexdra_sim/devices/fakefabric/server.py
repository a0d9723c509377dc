"""One node's fake fabric: GPU memory export and import, allowed only between holders of one channel.

The stand-in for "the driver plus the IMEX daemons" (docs/fake-fabric.md §4). A caller connects over
TCP and sends one JSON object per line; every request is judged by the channels the calling process
holds *at that moment*, read from ``/proc`` (``peers.find_peer``), never by what it says.

Requests and answers (one line each):

- ``{"op": "export"}`` → ``{"handle": "<node>/<token>", "channel": N}``; the caller must hold exactly
  one channel.
- ``{"op": "import", "handle": H}`` → ``{"imported": H, "channel": N}`` when the caller holds the
  handle's channel, else ``{"error": "..."}`` naming both channels. A handle of another node is
  looked up at that node's fabric (``lookup``), which is how IMEX relays an import in one domain;
  a node this fabric has no address for is outside its IMEX domain, and the import fails.
- ``{"op": "lookup", "handle": H}`` (fabric to fabric) → ``{"channel": N}`` or ``{"error": ...}``.

Every decision is logged with both channel numbers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from imexdra_sim.devices.fakefabric.peers import Peer, find_peer

_log = logging.getLogger(__name__)

#: Where a fabric listens on its node's address (beside IMEX's own 50000).
FABRIC_PORT = 50100

PeerFinder = Callable[[tuple[str, int], tuple[str, int]], "Peer | None"]


class FabricError(Exception):
    """A request refused; the message goes back to the caller as ``{"error": ...}``."""


@dataclass
class Fabric:
    """The exports of one node, and how to reach the other fabrics of its IMEX domain."""

    node: str
    #: Nodes of the same IMEX domain → their fabric's (host, port).
    domain: Mapping[str, tuple[str, int]]
    #: The IMEX channels' character-device major on this node (its ``/proc/devices``).
    major: int
    exports: dict[str, int] = field(default_factory=dict)

    def finder(self) -> PeerFinder:
        """``find_peer`` for this node's channel major."""
        return lambda peer, server: find_peer(peer, server, major=self.major)

    async def handle(self, request: Mapping[str, Any], caller: Peer | None) -> dict[str, Any]:
        """Answer one request of ``caller`` (None: no local process behind the connection)."""
        op = request.get("op")
        if op == "lookup":
            return {"channel": self._exported_channel(str(request.get("handle", "")))}
        held = caller.channels if caller is not None else ()
        if op == "export":
            if len(held) != 1:
                raise FabricError(
                    f"export needs exactly one IMEX channel open; the caller holds {list(held)}"
                )
            handle = f"{self.node}/{secrets.token_hex(16)}"
            self.exports[handle] = held[0]
            _log.info("exported %s on channel %d", handle, held[0])
            return {"handle": handle, "channel": held[0]}
        if op == "import":
            handle = str(request.get("handle", ""))
            channel = await self._channel_of(handle)
            if channel not in held:
                _log.info(
                    "import of %s refused: exported on channel %d, caller holds %s", handle, channel, held
                )
                raise FabricError(
                    f"import refused: {handle} was exported on IMEX channel {channel}; "
                    f"the caller holds {list(held) or 'no channel'}"
                )
            _log.info("imported %s on channel %d", handle, channel)
            return {"imported": handle, "channel": channel}
        raise FabricError(f"unknown op {op!r}: use export, import or lookup")

    def _exported_channel(self, handle: str) -> int:
        if handle not in self.exports:
            raise FabricError(f"unknown handle {handle!r} on node {self.node}")
        return self.exports[handle]

    async def _channel_of(self, handle: str) -> int:
        node, _, _ = handle.partition("/")
        if node == self.node:
            return self._exported_channel(handle)
        if node not in self.domain:
            raise FabricError(f"import refused: node {node!r} is not in this node's IMEX domain")
        answer = await request_once(self.domain[node], {"op": "lookup", "handle": handle})
        if "error" in answer:
            raise FabricError(str(answer["error"]))
        return int(answer["channel"])


async def request_once(address: tuple[str, int], request: Mapping[str, Any]) -> dict[str, Any]:
    """Send one request to a fabric and return its answer."""
    reader, writer = await asyncio.open_connection(*address)
    try:
        writer.write(json.dumps(request).encode() + b"\n")
        await writer.drain()
        answer: dict[str, Any] = json.loads(await reader.readline())
        return answer
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def serve(fabric: Fabric, host: str, port: int = FABRIC_PORT) -> asyncio.Server:
    """Listen for callers and other fabrics on ``host:port``."""
    finder = fabric.finder()

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")[:2]
        local = writer.get_extra_info("sockname")[:2]
        try:
            while line := await reader.readline():
                try:
                    request = json.loads(line)
                    # Fabric-to-fabric lookups hold no channel; every other request is judged by one.
                    lookup = isinstance(request, dict) and request.get("op") == "lookup"
                    caller = None if lookup else await asyncio.to_thread(finder, peer, local)
                    answer = await fabric.handle(request, caller)
                except (FabricError, ValueError, AttributeError) as error:
                    answer = {"error": str(error)}
                writer.write(json.dumps(answer).encode() + b"\n")
                await writer.drain()
        finally:
            writer.close()

    return await asyncio.start_server(connection, host, port)
