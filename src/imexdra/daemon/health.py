"""IMEX peer health: read the local IMEX daemon's connections, publish them on the daemon's own pod.

Every ``interval`` seconds, while IMEX runs, the daemon reads ``nvidia-imex-ctl -N``
(``devices.imexnodes``) and reduces its own row of the matrix to an ``api.imexpeers.ImexPeers`` over
the other members of its clique, by node name (``summarize``). The summary goes into the annotation
``resource.nvidia.com/imexPeers`` of the daemon's own pod, the one object a daemon writes
(docs/architecture.md §5); the controller rolls it up into the clique, ``status.nodes`` and the
``IMEXPeersConnected`` condition (docs/imex-health.md).

Writes are kept cheap, since N daemons times a write each is the storm upstream suffers from:

- a summary equal to the last one written is never written again (publish on change only);
- two writes are at least ``3 * interval`` apart; a change inside that window waits, and only the
  newest summary is written when it ends;
- for ``2 * interval`` after a membership change or an IMEX (re)start nothing is published, because
  IMEX is still converging (a reload is deferred by up to 5.5 s, connections take a probe or two).

A failed read or write is logged and retried on the next poll; it never stops the daemon.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable

import structlog

from imexdra.api.imexpeers import (
    CONNECTED,
    IMEX_PEERS_ANNOTATION,
    REPORT_SPACING_POLLS,
    ImexPeers,
    PeerLink,
    encode_annotation,
)
from imexdra.common.errors import DriverError
from imexdra.common.kube.api import KubeApi, PatchType
from imexdra.common.kube.client import kube_errors
from imexdra.common.kube.models.core_v1 import Pod
from imexdra.daemon.membership import Membership, Peer
from imexdra.daemon.peers import Latest
from imexdra.devices.imex import ImexError
from imexdra.devices.imexnodes import NodesReport

_log = structlog.get_logger(__name__)

#: State reported for a member IMEX does not list (its node list is not reloaded yet).
NOT_LISTED = "?"


def _position(membership: Membership, peer: Peer, *, dns_names: bool) -> int:
    """The peer's number in IMEX's node list: its DNS slot, or its line in the IP-mode ``nodes.cfg``."""
    return peer.index if dns_names else membership.peers.index(peer)


def summarize(report: NodesReport, membership: Membership, *, dns_names: bool) -> ImexPeers | None:
    """How this daemon's IMEX sees each other member of the clique; None before it has an entry.

    A member is found in the table by its IP (what ``-N`` prints), else by its position in the node
    list; one IMEX does not list (yet) is reported with state ``?``.
    """
    own = membership.own
    if own is None:
        return None
    listed = {node.index for node in report.nodes}

    def number(peer: Peer) -> int | None:
        found = report.index_of(peer.ip)
        if found is None:
            found = _position(membership, peer, dns_names=dns_names)
        return found if found in listed else None

    own_number = number(own)
    row = report.row(own_number) if own_number is not None else {}
    peers = [peer for peer in membership.peers if peer != own]
    not_connected: list[PeerLink] = []
    for peer in peers:
        at = number(peer)
        state = row.get(at, NOT_LISTED) if at is not None else NOT_LISTED
        if state != CONNECTED:
            not_connected.append(PeerLink(node_name=peer.node_name, state=state))
    not_connected.sort(key=lambda link: link.node_name)
    return ImexPeers(
        connected=len(peers) - len(not_connected), expected=len(peers), not_connected=not_connected
    )


class PeerHealthReporter:
    """Polls IMEX's connectivity table and publishes this daemon's summary on change, rate-limited."""

    def __init__(
        self,
        *,
        read: Callable[[], Awaitable[NodesReport]],
        memberships: Latest[Membership],
        imex_pid: Callable[[], int | None],
        publish: Callable[[ImexPeers], Awaitable[None]],
        dns_names: bool,
        interval: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Poll every ``interval`` seconds; settle for two and space writes by three intervals."""
        self._read, self._memberships, self._imex_pid, self._publish = read, memberships, imex_pid, publish
        self._dns_names = dns_names
        self.interval = interval
        self.settle = 2 * interval
        self.min_write_interval = REPORT_SPACING_POLLS * interval
        self._clock = clock
        self._seen: tuple[int, int | None] = (0, None)  # membership version, IMEX pid
        self._quiet_until = -math.inf
        self._last_write = -math.inf
        self.written: ImexPeers | None = None
        self._last_error = ""

    async def run(self) -> None:
        """Poll until cancelled."""
        while True:
            await self.poll()
            await asyncio.sleep(self.interval)

    async def poll(self) -> None:
        """One round: read the table (unless settling) and publish the summary if it is due."""
        version, membership = self._memberships.current()
        pid = self._imex_pid()
        now = self._clock()
        if (version, pid) != self._seen:
            self._seen = (version, pid)
            self._quiet_until = now + self.settle
        if membership is None or pid is None or now < self._quiet_until:
            return
        try:
            report = await self._read()
        except ImexError as error:
            self._note_error(f"read IMEX connections: {error}")
            return
        summary = summarize(report, membership, dns_names=self._dns_names)
        if summary is None or summary == self.written or now - self._last_write < self.min_write_interval:
            return
        try:
            await self._publish(summary)
        except DriverError as error:
            self._note_error(f"publish IMEX connections: {error}")
            return
        self._last_error = ""
        self._last_write, self.written = now, summary
        _log.info(
            "IMEX peer connections published",
            connected=summary.connected,
            expected=summary.expected,
            not_connected={link.node_name: link.state for link in summary.not_connected},
        )

    def _note_error(self, message: str) -> None:
        if message != self._last_error:  # once per distinct failure, not once per poll
            _log.warning("IMEX peer health not reported", error=message)
        self._last_error = message


def pod_annotator(client: KubeApi, *, name: str, namespace: str) -> Callable[[ImexPeers], Awaitable[None]]:
    """A ``publish`` that merge-patches the summary into this daemon's own pod's annotation."""

    async def publish(summary: ImexPeers) -> None:
        patch = {"metadata": {"annotations": {IMEX_PEERS_ANNOTATION: encode_annotation(summary)}}}
        with kube_errors(f"annotate pod {namespace}/{name}"):
            await client.patch(Pod, name, patch, namespace=namespace, patch_type=PatchType.MERGE)

    return publish
