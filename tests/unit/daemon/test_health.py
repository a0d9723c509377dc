"""IMEX peer health in the daemon: the summary of -N by node name, and publishing it on change only."""

from __future__ import annotations

import pytest

from imexdra.api.imexpeers import ImexPeers, PeerLink
from imexdra.common.kube.client import RetryableApiError
from imexdra.daemon.health import PeerHealthReporter, summarize
from imexdra.daemon.membership import Membership, Peer
from imexdra.daemon.peers import Latest
from imexdra.devices.imex import ImexError
from imexdra.devices.imexnodes import NodeLine, NodesReport

A, B, C = Peer("node-a", "10.0.0.1", 0), Peer("node-b", "10.0.0.2", 1), Peer("node-c", "10.0.0.3", 2)
THREE = Membership(peers=(A, B, C), own=A)


def report(
    row: dict[int, str], *, addresses: tuple[str, ...] = ("10.0.0.1", "10.0.0.2", "10.0.0.3")
) -> NodesReport:
    nodes = tuple(NodeLine(i, address, "READY", "570") for i, address in enumerate(addresses))
    return NodesReport(nodes, {0: row}, "UP")


@pytest.mark.parametrize(
    ("row", "addresses", "expected"),
    [
        ({0: "C", 1: "C", 2: "C"}, ("10.0.0.1", "10.0.0.2", "10.0.0.3"), ImexPeers(connected=2, expected=2)),
        (
            {0: "C", 1: "C", 2: "R"},
            ("10.0.0.1", "10.0.0.2", "10.0.0.3"),
            ImexPeers(connected=1, expected=2, not_connected=[PeerLink(node_name="node-c", state="R")]),
        ),
        (
            # IMEX not reloaded yet: node-c is not in its list at all.
            {0: "C", 1: "C"},
            ("10.0.0.1", "10.0.0.2"),
            ImexPeers(connected=1, expected=2, not_connected=[PeerLink(node_name="node-c", state="?")]),
        ),
        (
            # Names IMEX printed instead of IPs: found by DNS slot.
            {0: "C", 1: "!M!", 2: "C"},
            ("compute-domain-daemon-0000", "compute-domain-daemon-0001", "compute-domain-daemon-0002"),
            ImexPeers(connected=1, expected=2, not_connected=[PeerLink(node_name="node-b", state="!M!")]),
        ),
    ],
    ids=["all-connected", "one-recovering", "not-listed-yet", "found-by-slot"],
)
def test_summary_by_node_name(row: dict[int, str], addresses: tuple[str, ...], expected: ImexPeers) -> None:
    """Our own row of the matrix, over the other members, by node name."""
    assert summarize(report(row, addresses=addresses), THREE, dns_names=True) == expected


def test_summary_uses_own_row_found_by_ip() -> None:
    """The row read is the one of the node listed with our IP, not row 0."""
    me_second = Membership(peers=(B, A, C), own=A)  # IP mode: nodes.cfg order is the membership's
    table = NodesReport(
        tuple(NodeLine(i, ip, "READY", "570") for i, ip in enumerate(("10.0.0.2", "10.0.0.1", "10.0.0.3"))),
        {0: {0: "C", 1: "C", 2: "C"}, 1: {0: "D", 1: "C", 2: "C"}},
        "DEGRADED",
    )
    assert summarize(table, me_second, dns_names=False) == ImexPeers(
        connected=1, expected=2, not_connected=[PeerLink(node_name="node-b", state="D")]
    )


def test_no_summary_without_own_entry() -> None:
    """Before the controller listed this daemon there is nothing to say."""
    assert summarize(report({0: "C"}), Membership(peers=(B, C), own=None), dns_names=True) is None


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Rig:
    """A reporter with a settable table, IMEX pid and clock, recording what it publishes."""

    def __init__(self) -> None:
        self.row: dict[int, str] = {0: "C", 1: "C", 2: "C"}
        self.pid: int | None = 4242
        self.published: list[ImexPeers] = []
        self.fail_reads = False
        self.fail_publishes = 0
        self.clock = Clock()
        self.memberships: Latest[Membership] = Latest()
        self.memberships.publish(THREE)
        self.reporter = PeerHealthReporter(
            read=self.read,
            memberships=self.memberships,
            imex_pid=lambda: self.pid,
            publish=self.publish,
            dns_names=True,
            interval=10.0,
            clock=self.clock,
        )

    async def read(self) -> NodesReport:
        if self.fail_reads:
            raise ImexError("nvidia-imex-ctl -N did not answer within 10s")
        return report(self.row)

    async def publish(self, summary: ImexPeers) -> None:
        if self.fail_publishes:
            self.fail_publishes -= 1
            raise RetryableApiError("annotate pod nvidia/daemon-a: 503 Service Unavailable", code=503)
        self.published.append(summary)

    async def poll_at(self, now: float) -> None:
        self.clock.now = now
        await self.reporter.poll()


async def test_publishes_after_settling_then_only_on_change() -> None:
    """Nothing while IMEX settles; then one write; the same summary again writes nothing."""
    rig = Rig()
    await rig.poll_at(100)
    await rig.poll_at(110)
    assert rig.published == []  # within 2 intervals of first seeing this membership and IMEX
    await rig.poll_at(120)
    assert rig.published == [ImexPeers(connected=2, expected=2)]
    for t in range(130, 300, 10):
        await rig.poll_at(t)
    assert len(rig.published) == 1


async def test_changes_are_spaced_and_coalesced() -> None:
    """A change inside 3 intervals of the last write waits; only the newest summary is then written."""
    rig = Rig()
    await rig.poll_at(100)
    await rig.poll_at(120)
    rig.row = {0: "C", 1: "C", 2: "R"}
    await rig.poll_at(130)
    rig.row = {0: "C", 1: "D", 2: "R"}
    await rig.poll_at(140)
    assert len(rig.published) == 1
    await rig.poll_at(150)  # 30 s after the first write
    assert rig.published[-1] == ImexPeers(
        connected=0,
        expected=2,
        not_connected=[PeerLink(node_name="node-b", state="D"), PeerLink(node_name="node-c", state="R")],
    )
    rig.row = {0: "C", 1: "C", 2: "C"}
    await rig.poll_at(170)
    await rig.poll_at(180)
    assert len(rig.published) == 3 and rig.published[-1].healthy


async def test_membership_change_or_imex_restart_settles_again() -> None:
    """A new membership or IMEX pid silences the reporter for two intervals."""
    rig = Rig()
    await rig.poll_at(100)
    await rig.poll_at(120)
    rig.memberships.publish(Membership(peers=(A, B), own=A))
    await rig.poll_at(160)
    assert len(rig.published) == 1
    await rig.poll_at(180)
    assert rig.published[-1] == ImexPeers(connected=1, expected=1)
    rig.pid = 4343
    rig.row = {0: "C", 1: "R"}
    await rig.poll_at(220)
    await rig.poll_at(230)
    assert len(rig.published) == 2
    await rig.poll_at(240)
    assert rig.published[-1].not_connected == [PeerLink(node_name="node-b", state="R")]


async def test_no_imex_or_failed_read_publishes_nothing() -> None:
    """Without a running IMEX, or when -N fails, nothing is written; the next good read is."""
    rig = Rig()
    rig.pid = None
    await rig.poll_at(100)
    await rig.poll_at(200)
    assert rig.published == []
    rig.pid = 1
    rig.fail_reads = True
    await rig.poll_at(210)
    await rig.poll_at(240)
    assert rig.published == []
    rig.fail_reads = False
    await rig.poll_at(250)
    assert rig.published == [ImexPeers(connected=2, expected=2)]


async def test_a_failed_write_is_retried_on_the_next_poll() -> None:
    """A write the API server refused does not count as written: the next poll writes it."""
    rig = Rig()
    rig.fail_publishes = 1
    await rig.poll_at(100)
    await rig.poll_at(120)
    assert rig.published == [] and rig.reporter.written is None
    await rig.poll_at(130)
    assert rig.published == [ImexPeers(connected=2, expected=2)]
