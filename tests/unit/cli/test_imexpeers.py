"""IMEX peer health in ``imexdra status`` and ``imexdra diagnose``: which node cannot reach which."""

from __future__ import annotations

from typing import Any

from imexdra.cli.clusterview import ImexMode
from imexdra.cli.diagnose import diagnose
from imexdra.cli.findings import Severity
from imexdra.cli.status import Snapshot, build_report, render_text
from tests.unit.cli import objects as o
from tests.unit.cli.objects import view


def reported(
    name: str, index: int, *, missing: dict[str, str] | None = None, total: int = 2
) -> dict[str, Any]:
    entry = o.status_node(name, index)
    links = [{"nodeName": peer, "state": state} for peer, state in (missing or {}).items()]
    entry["imexPeers"] = {"connected": total - len(links), "expected": total, "notConnected": links}
    return entry


def condition(status: str, reason: str, message: str = "m") -> dict[str, Any]:
    return {
        "type": "IMEXPeersConnected",
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-12-01T10:00:00Z",
    }


DEGRADED = {
    "status": "Ready",
    "nodes": [
        reported("node-a", 0, missing={"node-c": "R"}),
        reported("node-b", 1, missing={"node-c": "!M!"}),
        reported("node-c", 2),
    ],
    "conditions": [condition("False", "PeersNotConnected")],
}


def test_status_shows_counts_and_the_peers_not_connected() -> None:
    """The clique table's IMEX PEERS column and the domain's condition column."""
    clique = o.clique(nodes=("node-a",))
    clique.daemons[0].imex_peers = o.domain(status=DEGRADED).status.nodes[0].imex_peers  # type: ignore[union-attr]
    snapshot = Snapshot(
        driver_namespace=o.DRIVER_NS,
        imex_mode=ImexMode.DRIVER_MANAGED,
        domains=[o.domain(status=DEGRADED)],
        cliques=[clique],
    )
    report = build_report(snapshot)
    (row,) = report["computeDomains"]
    assert row["imexPeersConnected"] == "False"
    assert row["cliques"][0]["daemons"][0]["imexPeers"] == {
        "connected": 1,
        "expected": 2,
        "notConnected": {"node-c": "R"},
    }
    text = render_text(report)
    assert "1/2 (node-c: R)" in text.split("CLIQUES")[1]
    domains = text.split("CLIQUES")[0]
    assert "IMEX PEERS" in domains and "False" in domains


def test_status_of_a_domain_without_reports() -> None:
    """No reports: no condition value, and '-' for each daemon."""
    snapshot = Snapshot(
        driver_namespace=o.DRIVER_NS,
        imex_mode=ImexMode.DRIVER_MANAGED,
        domains=[o.domain(status={"status": "Ready", "nodes": [o.status_node("node-a", 0)]})],
        cliques=[o.clique(nodes=("node-a",))],
    )
    report = build_report(snapshot)
    assert report["computeDomains"][0]["imexPeersConnected"] is None
    assert report["computeDomains"][0]["cliques"][0]["daemons"][0]["imexPeers"] is None


def test_diagnose_names_each_broken_pair_with_a_hint() -> None:
    """One error per pair, with IMEX's state in words and what it suggests; no duplicate condition."""
    findings = diagnose(view(domain=o.domain(status=DEGRADED)))
    peers = [f for f in findings if "cannot reach" in f.message]
    assert [(f.severity, f.message) for f in peers] == [
        (
            Severity.ERROR,
            "IMEX daemon on node-a cannot reach node-c: "
            "R (recovering: connection lost, clean-up not yet triggered)",
        ),
        (Severity.ERROR, "IMEX daemon on node-b cannot reach node-c: !M! (node map mismatch)"),
    ]
    assert "SERVER_PORT" in peers[0].hint and "node lists" in peers[1].hint
    assert not any("condition IMEXPeersConnected" in f.message for f in findings)


def test_diagnose_waits_for_reports_and_is_quiet_when_all_connected() -> None:
    """Unknown while a node has not reported: a warning naming it; all connected: nothing."""
    pending = {
        "status": "Ready",
        "nodes": [reported("node-a", 0, total=1), o.status_node("node-b", 1)],
        "conditions": [condition("Unknown", "NotAllReported")],
    }
    findings = diagnose(view(domain=o.domain(status=pending)))
    assert [(f.severity, f.message) for f in findings if "IMEX peer" in f.message] == [
        (Severity.WARNING, "IMEX peer connections not reported yet by: node-b")
    ]
    healthy = {
        "status": "Ready",
        "nodes": [reported("node-a", 0, total=1), reported("node-b", 1, total=1)],
        "conditions": [condition("True", "AllPeersConnected")],
    }
    assert not any(f.is_problem for f in diagnose(view(domain=o.domain(status=healthy))))
