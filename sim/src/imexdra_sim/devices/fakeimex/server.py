"""One simulated IMEX daemon: node identity, peer probing, readiness, reload, and its answers.

Behaviour, mirroring what the driver relies on in the real daemon:

- the node list is read at start and again on each accepted SIGUSR1, which is processed at most once
  per ``SIGUSR1_MIN_INTERVAL`` seconds (later ones are counted and ignored);
- at start the daemon identifies itself as the node-list entry resolving to its own address and exits
  with IMEX's "No matching network interface..." error when there is none; its node ID is fixed from
  then on, so a reload that moves its own address to another entry leaves it NOT_READY until restarted
  (the index-churn failure of upstream issue #1418);
- it listens on ``<own address>:SERVER_PORT`` and probes every other resolvable entry there; a peer is
  Connected (``C``) when it answers with the same node list, the same version and the node ID the entry
  implies, otherwise ``!M!``/``!V!``, or ``N``/``R`` when it does not answer (never / no longer);
- it is ``READY`` once started unless an init failure stands: its own ID moved, or a peer answers
  with another node map or version (``!M!``/``!V!``). Peers that do not answer (``N``, ``R``) leave it
  ``READY``: IMEX needs no full quorum to initialize, and a lost peer only degrades the domain
  (``-N``'s Domain State), as NVIDIA's IMEX guide says (docs/hardware.md §7.2). SIGTERM/SIGINT stop
  it with exit code 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imexdra.devices.imex import (
    BIND_INTERFACE_IP,
    CMD_BIND_INTERFACE_IP,
    CMD_ENABLED,
    CMD_PORT,
    CMD_UNIX_DOMAIN_PATH,
    DEFAULT_NODE_CONFIG_PATH,
    DEFAULT_SERVER_PORT,
    LOG_FILE_NAME,
    NODE_CONFIG_FILE,
    SERVER_PORT,
    SIGUSR1_MIN_INTERVAL,
    config_int,
)
from imexdra_sim.devices.fakeimex.nodemap import NodeEntry, NodeMap, load_node_map
from imexdra_sim.devices.fakeimex.protocol import Message, ProtocolError, decode, encode, read_message

VERSION = "570.172.08"
HOSTS_FILE_ENV = "FAKE_IMEX_HOSTS_FILE"
PROBE_INTERVAL_ENV = "FAKE_IMEX_PROBE_INTERVAL"
#: A file standing for the node's IMEX role in the driver, which one IMEX daemon at a time can hold.
NODE_LOCK_ENV = "FAKE_IMEX_NODE_LOCK"
IN_USE_MESSAGE = (
    "Failed to register this IMEX daemon with the driver: NV_ERR_IN_USE "
    "(another IMEX daemon already runs on this node)"
)
NO_INTERFACE_MESSAGE = (
    "No matching network interface found for any IP addresses in the node configuration file"
)

READY = "READY"
NOT_READY = "NOT_READY"
UNAVAILABLE = "UNAVAILABLE"
# Connectivity states, as nvidia-imex-ctl -N prints them.
CONNECTED, NEVER, RECOVERING, INVALID, MAP_MISMATCH, VERSION_MISMATCH = "C", "N", "R", "I", "!M!", "!V!"

#: Peer states IMEX treats as initialization failures (IMEX guide, "Constraints").
_INIT_FAILURES = frozenset({MAP_MISMATCH, VERSION_MISMATCH})

_PEER_TIMEOUT = 1.0


@dataclass(frozen=True, slots=True)
class Settings:
    """The parts of the IMEX config the fake acts on."""

    server_port: int
    node_file: Path
    bind_ip: str
    cmd_enabled: bool
    cmd_bind_ip: str
    cmd_port: int | None
    cmd_socket: str
    log_file: str

    @classmethod
    def from_config(cls, config: dict[str, str]) -> Settings:
        """Pick the settings out of a parsed config (raises ``ValueError`` on a bad number)."""
        return cls(
            server_port=config_int(config, SERVER_PORT) or DEFAULT_SERVER_PORT,
            node_file=Path(config.get(NODE_CONFIG_FILE) or DEFAULT_NODE_CONFIG_PATH),
            bind_ip=config.get(BIND_INTERFACE_IP, ""),
            cmd_enabled=config.get(CMD_ENABLED, "0") == "1",
            cmd_bind_ip=config.get(CMD_BIND_INTERFACE_IP, ""),
            cmd_port=config_int(config, CMD_PORT),
            cmd_socket=config.get(CMD_UNIX_DOMAIN_PATH, ""),
            log_file=config.get(LOG_FILE_NAME, ""),
        )


@dataclass(slots=True)
class Link:
    """What this daemon knows about one peer."""

    entry: str
    address: str
    state: str = NEVER
    node_state: str = ""
    version: str = ""
    row: dict[str, str] = field(default_factory=dict)


def _bindable(address: str) -> bool:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((address, 0))
        except OSError:
            return False
    return True


class FakeImexDaemon:
    """One simulated IMEX daemon."""

    def __init__(
        self, settings: Settings, *, hosts_file: Path, probe_interval: float, log: Callable[[str], None]
    ) -> None:
        """Prepare; nothing is read or bound before ``run``."""
        self.settings = settings
        self.hosts_file = hosts_file
        self.probe_interval = probe_interval
        self.log = log
        self.started_at = time.time()
        self.reloads = 0
        self.ignored_signals = 0
        self.node_map = NodeMap(())
        self.own_address = ""
        self.own_index = -1
        self.error = ""
        self.links: dict[int, Link] = {}
        self._last_reload = -float("inf")
        self._stop = asyncio.Event()

    async def run(self, *, pending_reload: bool = False) -> int:
        """Serve until SIGTERM/SIGINT; the exit code (1 when the daemon cannot start)."""
        try:
            self.node_map = load_node_map(self.settings.node_file, self.hosts_file)
        except OSError as error:
            self.log(f"Failed to read node configuration file {self.settings.node_file}: {error}")
            return 1
        own = self._own_address()
        index = self.node_map.index_of(own) if own else None
        if index is None:
            self.log(NO_INTERFACE_MESSAGE)
            return 1
        self.own_address, self.own_index = own, index
        self.log(f"Identified this node as ID {index}, using bind IP of '{own}'")
        try:
            servers = await self._serve()
        except OSError as error:
            self.log(f"Failed to start listening: {error}")
            return 1
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGUSR1, self.reload)
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._stop.set)
        if pending_reload:
            self.reload()
        self.log(f"IMEX daemon {VERSION} started with {len(self.node_map.nodes)} node list entries")
        prober = asyncio.create_task(self._probe_loop())
        await self._stop.wait()
        prober.cancel()
        for server in servers:
            server.close()
        self.log("Shutting down IMEX daemon")
        return 0

    def _own_address(self) -> str:
        if self.settings.bind_ip or self.settings.cmd_bind_ip:
            return self.settings.bind_ip or self.settings.cmd_bind_ip
        for node in self.node_map.nodes:
            if node.address and _bindable(node.address):
                return node.address
        return ""

    async def _serve(self) -> list[asyncio.Server]:
        servers = [
            await asyncio.start_server(
                self._on_peer, self.own_address, self.settings.server_port, reuse_address=True
            )
        ]
        if self.settings.cmd_enabled and self.settings.cmd_port:
            host = self.settings.cmd_bind_ip or None  # empty: every interface
            servers.append(
                await asyncio.start_server(self._on_command, host, self.settings.cmd_port, reuse_address=True)
            )
        if self.settings.cmd_enabled and self.settings.cmd_socket:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.settings.cmd_socket)  # noqa: PTH108 - a stale socket of a previous run
            servers.append(await asyncio.start_unix_server(self._on_command, self.settings.cmd_socket))
        return servers

    # -- membership -------------------------------------------------------------------------------

    def reload(self) -> None:
        """SIGUSR1: re-read and re-resolve the node list, unless one was processed too recently."""
        now = time.monotonic()
        if now - self._last_reload < SIGUSR1_MIN_INTERVAL:
            self.ignored_signals += 1
            self.log("Ignoring SIGUSR1: the previous one was processed less than 5 seconds ago")
            return
        self._last_reload = now
        self.reloads += 1
        try:
            node_map = load_node_map(self.settings.node_file, self.hosts_file)
        except OSError as error:
            self.log(f"SIGUSR1: failed to re-read node configuration: {error}")
            return
        moved_to = node_map.index_of(self.own_address)
        self.error = (
            ""
            if moved_to == self.own_index
            else f"this node is ID {self.own_index} but the node list now says {moved_to}; restart required"
        )
        if self.error:
            self.log(self.error)
        self.node_map = node_map
        self.links = {
            i: link
            for i, link in self.links.items()
            if i < len(node_map.nodes)
            and (node_map.nodes[i].entry, node_map.nodes[i].address) == (link.entry, link.address)
        }
        resolved = sum(1 for node in node_map.nodes if node.address)
        self.log(f"SIGUSR1: re-read node list, {resolved} of {len(node_map.nodes)} entries resolved")

    def _peers(self) -> list[NodeEntry]:
        return [node for node in self.node_map.nodes if node.address and node.index != self.own_index]

    async def _probe_loop(self) -> None:
        while True:
            await asyncio.gather(*(self._probe(node) for node in self._peers()))
            await asyncio.sleep(self.probe_interval)

    async def _probe(self, node: NodeEntry) -> None:
        assert node.address is not None
        link = self.links.get(node.index)
        if link is None or (link.entry, link.address) != (node.entry, node.address):
            link = self.links[node.index] = Link(node.entry, node.address)
        try:
            answer = await _ask(node.address, self.settings.server_port, self._hello())
        except (OSError, TimeoutError, ProtocolError):
            link.state = RECOVERING if link.state != NEVER else NEVER
            link.node_state, link.row = "", {}
            return
        link.version = str(answer.get("version", ""))
        link.node_state = str(answer.get("state", ""))
        row = answer.get("row")
        link.row = {str(k): str(v) for k, v in row.items()} if isinstance(row, dict) else {}
        if link.version != VERSION:
            link.state = VERSION_MISMATCH
        elif answer.get("nodeMap") != self.node_map.entries or answer.get("node") != node.index:
            link.state = MAP_MISMATCH
        else:
            link.state = CONNECTED

    # -- answers ----------------------------------------------------------------------------------

    def state(self) -> str:
        """READY unless an init failure stands (own ID moved, a peer's node map or version differs).

        A peer that never answered or stopped answering does not count: a node lost from the rack
        must not take every other daemon's readiness (and then, through its liveness probe, its
        process) with it.
        """
        if self.error:
            return NOT_READY
        links = [self.links.get(node.index) for node in self._peers()]
        mismatched = any(link is not None and link.state in _INIT_FAILURES for link in links)
        return NOT_READY if mismatched else READY

    def _row(self) -> dict[str, str]:
        row: dict[str, str] = {}
        for node in self.node_map.nodes:
            link = self.links.get(node.index)
            if node.index == self.own_index:
                row[str(node.index)] = CONNECTED
            elif node.address is None:
                row[str(node.index)] = INVALID
            else:
                row[str(node.index)] = link.state if link is not None else NEVER
        return row

    def _hello(self) -> Message:
        return {
            "type": "hello",
            "node": self.own_index,
            "address": self.own_address,
            "nodeMap": self.node_map.entries,
            "version": VERSION,
            "state": self.state(),
            "row": self._row(),
        }

    def status(self) -> Message:
        """Everything ``nvidia-imex-ctl`` prints, plus process facts tests look at."""
        own_row = self._row()
        nodes: list[dict[str, Any]] = []
        matrix: dict[str, dict[str, str]] = {str(self.own_index): own_row}
        for node in self.node_map.nodes:
            link = self.links.get(node.index)
            connected = link is not None and link.state == CONNECTED
            if node.index == self.own_index:
                state, version = self.state(), VERSION
            else:
                state = link.node_state if connected and link is not None else UNAVAILABLE
                version = link.version if link is not None else ""
                if link is not None and link.row:
                    matrix[str(node.index)] = link.row
            nodes.append(
                {
                    "index": node.index,
                    "entry": node.entry,
                    "address": node.address,
                    "state": state,
                    "version": version,
                }
            )
        up = all(own_row[str(node.index)] == CONNECTED for node in self.node_map.nodes if node.address)
        return {
            "state": self.state(),
            "version": VERSION,
            "pid": os.getpid(),
            "startedAt": self.started_at,
            "reloads": self.reloads,
            "ignoredSignals": self.ignored_signals,
            "selfIndex": self.own_index,
            "nodeMapError": self.error,
            "nodes": nodes,
            "matrix": matrix,
            "domainState": "UP" if up and not self.error else "DEGRADED",
        }

    async def _on_peer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._answer(reader, writer, lambda _request: self._hello())

    async def _on_command(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        def answer(request: Message) -> Message:
            if request.get("op") == "status":
                return self.status()
            return {"error": f"unknown operation {request.get('op')!r}"}

        await self._answer(reader, writer, answer)

    @staticmethod
    async def _answer(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, answer: Callable[[Message], Message]
    ) -> None:
        try:
            request = await asyncio.wait_for(read_message(reader), timeout=_PEER_TIMEOUT * 2)
            writer.write(encode(answer(request)))
            await writer.drain()
        except (OSError, TimeoutError, ProtocolError):
            pass
        finally:
            writer.close()


async def _ask(host: str, port: int, message: Message) -> Message:
    """One request/answer exchange with a peer, bounded by the peer timeout."""
    async with asyncio.timeout(_PEER_TIMEOUT):
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(encode(message))
            await writer.drain()
            return decode(await reader.readline())
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
