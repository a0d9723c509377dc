"""Membership change → files and action, for DNS-names mode and IP mode (the reload-vs-restart rules)."""

from __future__ import annotations

import pytest

from imexdra.daemon import planning
from imexdra.daemon.membership import Membership, Peer
from imexdra.daemon.planning import Action, Applied, Plan, plan_ip

A, B, C = Peer("node-a", "10.0.0.1", 0), Peer("node-b", "10.0.0.2", 1), Peer("node-c", "10.0.0.3", 2)
UID = "4c1d2a8e-7f3b-4e0a-9b6d-2e5f8a1c3d70"  # its hash, 64f89983, is checked in test_imexconfig


def members(*peers: Peer, own: Peer | None = B, expected: int = 0) -> Membership:
    return Membership(peers=tuple(peers), own=own, expected=expected)


def hosts(*peers: Peer) -> dict[str, str]:
    """All 18 slots: the peers' at their IPs, every other one at the sentinel 127.0.0.2."""
    mapping = {f"compute-domain-daemon-64f89983-{i:04d}": "127.0.0.2" for i in range(18)}
    mapping.update({f"compute-domain-daemon-64f89983-{p.index:04d}": p.ip for p in peers})
    return mapping


def plan_dns(applied: Applied, membership: Membership, *, max_nodes: int = 18) -> Plan:
    return planning.plan_dns(applied, membership, domain_uid=UID, max_nodes=max_nodes)


RUNNING = Applied(started=True, own_index=1, hosts=hosts(A, B))


@pytest.mark.parametrize(
    ("applied", "membership", "action", "written"),
    [
        (Applied(), members(A, own=None), Action.NONE, None),
        (Applied(), members(B), Action.START, hosts(B)),
        (Applied(hosts=hosts(B)), members(B), Action.START, None),
        (RUNNING, members(A, B, C), Action.RELOAD, hosts(A, B, C)),
        (RUNNING, members(B), Action.RELOAD, hosts(B)),
        (
            RUNNING,
            members(Peer("node-a", "10.0.0.9", 0), B),
            Action.RELOAD,
            hosts(Peer("x", "10.0.0.9", 0), B),
        ),
        (RUNNING, members(A, B), Action.NONE, None),
        (
            RUNNING,
            members(A, Peer("node-b", "10.0.0.2", 3), own=Peer("node-b", "10.0.0.2", 3)),
            Action.RESTART,
            hosts(A, Peer("node-b", "10.0.0.2", 3)),
        ),
        (RUNNING, members(A, own=None), Action.NONE, None),
    ],
    ids=[
        "wait-for-own-entry",
        "start-on-own-entry-without-peers",
        "start-with-hosts-already-written",
        "peer-joined-reload",
        "peer-left-reload",
        "peer-ip-changed-reload",
        "nothing-changed",
        "own-index-changed-restart",
        "own-entry-gone-keep-running",
    ],
)
def test_dns_mode(
    applied: Applied, membership: Membership, action: Action, written: dict[str, str] | None
) -> None:
    """DNS-names mode reloads on membership changes and restarts only when its own index moves."""
    plan = plan_dns(applied, membership, max_nodes=18)
    assert (plan.action, plan.hosts, plan.nodes_config) == (action, written, None)
    if action is not Action.NONE:
        assert plan.applied.started and plan.applied.own_index == membership.own.index  # type: ignore[union-attr]


def test_dns_mode_skips_out_of_range_indices() -> None:
    """Entries whose index cannot name a DNS slot are reported and left out of the hosts file."""
    bad = Peer("node-x", "10.0.0.8", 18)
    plan = plan_dns(Applied(), members(B, bad), max_nodes=18)
    assert plan.invalid == (bad,)
    assert plan.hosts == hosts(B)
    own_bad = plan_dns(Applied(), members(bad, own=bad), max_nodes=18)
    assert own_bad.action is Action.NONE


def test_dns_mode_maps_unused_slots_to_the_sentinel() -> None:
    """Upstream #1465: every slot has a line, those without a daemon at 127.0.0.2, none left out."""
    plan = plan_dns(Applied(), members(A, C, own=C), max_nodes=4)
    assert plan.hosts == {
        "compute-domain-daemon-64f89983-0000": "10.0.0.1",
        "compute-domain-daemon-64f89983-0001": "127.0.0.2",
        "compute-domain-daemon-64f89983-0002": "10.0.0.3",
        "compute-domain-daemon-64f89983-0003": "127.0.0.2",
    }


def test_dns_mode_a_leaving_peer_becomes_the_sentinel() -> None:
    """A peer that leaves turns its slot back to 127.0.0.2 and reloads, rather than dropping the line."""
    running = plan_dns(Applied(), members(A, B, C), max_nodes=4)
    left = plan_dns(running.applied, members(B, C), max_nodes=4)
    assert left.action is Action.RELOAD
    assert left.hosts is not None and left.hosts["compute-domain-daemon-64f89983-0000"] == "127.0.0.2"
    assert len(left.hosts) == 4


def test_dns_mode_applied_state_round_trip() -> None:
    """Applying a plan and re-planning the same membership is a no-op."""
    first = plan_dns(Applied(), members(A, B), max_nodes=18)
    assert plan_dns(first.applied, members(A, B), max_nodes=18).action is Action.NONE


@pytest.mark.parametrize(
    ("applied", "membership", "action", "nodes"),
    [
        (Applied(), members(B, own=None), Action.NONE, None),
        (Applied(), members(A, B, expected=3), Action.NONE, None),
        (Applied(), members(A, B, C, expected=3), Action.START, "10.0.0.1\n10.0.0.2\n10.0.0.3\n"),
        (Applied(), members(B), Action.START, "10.0.0.2\n"),
        (
            Applied(started=True, nodes_config="10.0.0.2\n"),
            members(A, B),
            Action.RESTART,
            "10.0.0.1\n10.0.0.2\n",
        ),
        (Applied(started=True, nodes_config="10.0.0.1\n10.0.0.2\n"), members(A, B), Action.NONE, None),
    ],
    ids=[
        "wait-for-own-entry",
        "wait-for-num-nodes",
        "start-at-num-nodes",
        "no-num-nodes-start",
        "changed-restart",
        "unchanged",
    ],
)
def test_ip_mode(applied: Applied, membership: Membership, action: Action, nodes: str | None) -> None:
    """IP mode rewrites nodes.cfg and restarts on any change, after numNodes daemons are listed."""
    plan = plan_ip(applied, membership)
    assert (plan.action, plan.nodes_config, plan.hosts) == (action, nodes, None)
