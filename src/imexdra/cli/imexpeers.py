"""IMEX peer health as the CLI shows it: which node's IMEX daemon cannot reach which (docs/imex-health.md).

The controller publishes each node's ``imexPeers`` (its daemon's reading of ``nvidia-imex-ctl -N``) in
``status.nodes`` and the cliques, and rolls them up into the ``IMEXPeersConnected`` condition. ``status``
shows a node's count and the peers it is not connected to; ``diagnose`` turns every broken pair into
a finding with what IMEX's state for it suggests.
"""

from __future__ import annotations

from collections.abc import Sequence

from msgspec import UNSET

from imexdra.api.computedomain import ComputeDomain, ComputeDomainNode
from imexdra.api.computedomainclique import ComputeDomainDaemonInfo
from imexdra.api.constants import ConditionStatus
from imexdra.api.imexpeers import IMEX_PEERS_CONNECTED, ImexPeers, state_meaning
from imexdra.cli.findings import Finding, Severity

#: What IMEX's state for a peer suggests to check.
_STATE_HINTS = {
    "R": "the peer's IMEX daemon stopped answering: is its node up and its daemon pod Ready, and is TCP "
    "between the two daemons' pod IPs open on SERVER_PORT (50000; NetworkPolicy, firewall)?",
    "D": "the connection was lost long enough for IMEX to clean up (IMEX_NODE_DISCONNECTED_GRACE_TIME): "
    "imports from that node are invalid; check the node and the network between the two pod IPs",
    "N": "the two daemons never connected: the peer may still be starting, or TCP between their pod IPs "
    "on SERVER_PORT (50000) is blocked",
    "I": "IMEX could not reach the peer's address at all: check that its name resolves (the daemon's "
    "hosts file) and that the address is routable",
    "!M!": "the two daemons have different node lists: one has not re-read the membership yet; if it "
    "persists, restart the daemon pod on one of the nodes",
    "!V!": "the two nodes run different IMEX (driver) versions: upgrade them to the same driver",
    "?": "IMEX has not re-read its node list since the peer joined (SIGUSR1 is processed at most once "
    "every 5 s); it should clear within seconds",
}


def peers_of(entry: ComputeDomainNode | ComputeDomainDaemonInfo) -> ImexPeers | None:
    """The entry's report, None when its daemon has not reported."""
    peers = entry.imex_peers
    return None if peers is UNSET else peers


def peers_json(entry: ComputeDomainNode | ComputeDomainDaemonInfo) -> dict[str, object] | None:
    """The report as ``status -o json`` prints it."""
    peers = peers_of(entry)
    if peers is None:
        return None
    return {
        "connected": peers.connected,
        "expected": peers.expected,
        "notConnected": {link.node_name: link.state for link in peers.not_connected},
    }


def peers_text(report: dict[str, object] | None) -> str:
    """``3/3``, or ``2/3 (node-c: R)``; ``-`` when not reported."""
    if report is None:
        return "-"
    text = f"{report['connected']}/{report['expected']}"
    missing = report["notConnected"]
    assert isinstance(missing, dict)
    if missing:
        text += " (" + ", ".join(f"{node}: {state}" for node, state in missing.items()) + ")"
    return text


def imex_peer_findings(domain: ComputeDomain) -> list[Finding]:
    """One error per node pair whose IMEX daemons are not connected; a warning while reports are missing."""
    status = domain.status
    if status is None:
        return []
    nodes: Sequence[ComputeDomainNode] = status.nodes
    members = {(n.clique_id, n.name) for n in nodes if n.clique_id}
    findings = [
        Finding(
            Severity.ERROR,
            f"IMEX daemon on {node.name} cannot reach {link.node_name}: "
            f"{link.state} ({state_meaning(link.state)})",
            _STATE_HINTS.get(link.state, "inspect both daemon pods' logs (kubectl logs) for IMEX errors"),
        )
        for node in sorted(nodes, key=lambda n: n.name)
        if (peers := peers_of(node)) is not None
        for link in peers.not_connected
        if (node.clique_id, link.node_name) in members
    ]
    condition = status.condition(IMEX_PEERS_CONNECTED)
    if not findings and condition is not None and condition.status == ConditionStatus.UNKNOWN:
        silent = sorted(n.name for n in nodes if n.clique_id and peers_of(n) is None)
        findings.append(
            Finding(
                Severity.WARNING,
                f"IMEX peer connections not reported yet by: {', '.join(silent) or 'none'}",
                "a daemon reports once its IMEX has run for a few polls (IMEX_PEERS_POLL_INTERVAL); "
                "a daemon that never does cannot run nvidia-imex-ctl -N: see its logs",
            )
        )
    return findings
