"""IMEX health of a domain: the ``IMEXPeersConnected`` condition, its events, metrics, and a schema guard.

Each daemon reports how its IMEX daemon sees the other members of its clique (``api.imexpeers``, an
annotation on its own pod); ``membership`` copies the report into the node's clique and
``status.nodes`` entries as ``imexPeers``. This module rolls those entries up (docs/imex-health.md):

- the condition ``IMEXPeersConnected``: ``False`` (``PeersNotConnected``) when any node reports a
  current member of its clique not connected, naming each pair and IMEX's state; ``True``
  (``AllPeersConnected``) when every fabric node reported and all are connected; ``Unknown``
  (``NotAllReported``) otherwise. It exists once a node has reported, never before, so a domain whose
  daemons report nothing keeps upstream's status;
- a Warning Event ``IMEXPeersNotConnected`` when the set of broken pairs changes, a Normal
  ``IMEXPeersConnected`` when they are all mended, recorded only with the status write that publishes
  the change (so once per change, not once per reconcile);
- gauges ``imexdra_imex_peers_connected`` and ``imexdra_imex_peers_expected`` per domain and node;
- ``FieldGuard``: a cluster still running upstream's CRDs prunes ``imexPeers`` and the condition
  from what it stores. A controller comparing what it wants with what is stored would then write the
  same thing again on every pass, the storm this driver exists to avoid; so the first write whose
  answer lost the fields turns IMEX health publishing off for this process, with one warning saying
  which CRDs to apply.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

import msgspec
import structlog
from msgspec import UNSET
from prometheus_client import Gauge

from imexdra.api.computedomain import ComputeDomain, ComputeDomainNode, ComputeDomainStatus, Condition
from imexdra.api.computedomainclique import ComputeDomainDaemonInfo
from imexdra.api.constants import ConditionStatus
from imexdra.api.imexpeers import IMEX_PEERS_CONNECTED, ImexPeers, state_meaning
from imexdra.common.machinery.events import EventRecorder
from imexdra.common.machinery.store import KubeObject, object_key
from imexdra.controller import reasons
from imexdra.controller.daemons import DaemonPod

_log = structlog.get_logger(__name__)

ALL_CONNECTED = "AllPeersConnected"
NOT_CONNECTED = "PeersNotConnected"
NOT_ALL_REPORTED = "NotAllReported"
#: Broken pairs a condition message names before it gives only the count of the rest.
PAIRS_NAMED = 10

PEERS_CONNECTED = Gauge(
    "imexdra_imex_peers_connected",
    "IMEX peers a node's IMEX daemon is connected to, as its compute-domain daemon last reported.",
    ["namespace", "compute_domain", "node"],
)
PEERS_EXPECTED = Gauge(
    "imexdra_imex_peers_expected",
    "The other members of the node's clique, which its IMEX daemon should be connected to.",
    ["namespace", "compute_domain", "node"],
)


def _peers(entry: ComputeDomainNode | ComputeDomainDaemonInfo) -> ImexPeers | None:
    peers = entry.imex_peers
    return None if peers is UNSET else peers


def broken_pairs(nodes: Sequence[ComputeDomainNode]) -> list[tuple[str, str, str]]:
    """``(node, peer, state)`` for each reported peer not connected that is still a member of the clique."""
    members = {(n.clique_id, n.name) for n in nodes if n.clique_id}
    pairs: list[tuple[str, str, str]] = []
    for node in nodes:
        peers = _peers(node)
        if peers is None or not node.clique_id:
            continue
        pairs.extend(
            (node.name, link.node_name, link.state)
            for link in peers.not_connected
            if (node.clique_id, link.node_name) in members
        )
    return sorted(pairs)


def describe(pairs: Sequence[tuple[str, str, str]]) -> str:
    """``node-a cannot reach node-c (R: recovering ...); ...``, the first ``PAIRS_NAMED`` pairs."""
    named = "; ".join(
        f"{a} cannot reach {b} ({state}: {state_meaning(state)})" for a, b, state in pairs[:PAIRS_NAMED]
    )
    rest = len(pairs) - PAIRS_NAMED
    return f"{named}; and {rest} more" if rest > 0 else named


def peers_condition(
    previous: Condition | None, nodes: Sequence[ComputeDomainNode], *, now: datetime, generation: int
) -> Condition | None:
    """The ``IMEXPeersConnected`` condition for ``nodes``; None while no node has ever reported."""
    fabric = [n for n in nodes if n.clique_id]
    reported = [n for n in fabric if _peers(n) is not None]
    if not reported and previous is None:
        return None
    pairs = broken_pairs(nodes)
    if pairs:
        status, reason, message = ConditionStatus.FALSE, NOT_CONNECTED, describe(pairs)
    elif reported and len(reported) == len(fabric):
        status, reason = ConditionStatus.TRUE, ALL_CONNECTED
        message = f"the IMEX daemons of all {len(fabric)} node(s) are connected to every peer in their clique"
    else:
        status, reason = ConditionStatus.UNKNOWN, NOT_ALL_REPORTED
        message = f"{len(reported)} of {len(fabric)} node(s) reported their IMEX peer connections"
    since = (
        previous.last_transition_time
        if previous is not None and previous.status == status
        else now.replace(microsecond=0)
    )
    return Condition(
        type=IMEX_PEERS_CONNECTED,
        status=status,
        last_transition_time=since,
        reason=reason,
        message=message,
        observed_generation=generation,
    )


def with_condition(conditions: Sequence[Condition], condition: Condition | None) -> list[Condition]:
    """``conditions`` with ``IMEXPeersConnected`` replaced in place (or appended); unchanged for None."""
    if condition is None:
        return list(conditions)
    if any(c.type == IMEX_PEERS_CONNECTED for c in conditions):
        return [condition if c.type == IMEX_PEERS_CONNECTED else c for c in conditions]
    return [*conditions, condition]


def condition_of(cd: ComputeDomain) -> Condition | None:
    """The domain's published ``IMEXPeersConnected`` condition."""
    return condition_of_status(cd.status) if cd.status is not None else None


def condition_of_status(status: ComputeDomainStatus) -> Condition | None:
    """The ``IMEXPeersConnected`` condition of ``status``."""
    return status.condition(IMEX_PEERS_CONNECTED)


class FieldGuard:
    """Turns IMEX health publishing off once the API server is seen pruning its fields."""

    def __init__(self) -> None:
        self.kept = True

    def check(self, what: str, *, sent: bool, stored: bool) -> None:
        """After a write of ``what``: ``sent`` health fields, the answer ``stored`` them (or not)."""
        if self.kept and sent and not stored:
            self.kept = False
            _log.warning(
                "The API server dropped the IMEX health fields: its CRDs predate them; IMEX health is "
                "not published until the controller restarts on the chart's CRDs "
                "(kubectl apply --server-side -f deployments/helm/imexdra/crds/)",
                object=what,
            )


def _unreported(
    entries: Iterable[ComputeDomainNode | ComputeDomainDaemonInfo],
) -> dict[str, ComputeDomainNode | ComputeDomainDaemonInfo]:
    """The entries by node name, each without its report."""
    return {_node_of(e): msgspec.structs.replace(e, imex_peers=UNSET) for e in entries}


def _node_of(entry: ComputeDomainNode | ComputeDomainDaemonInfo) -> str:
    return entry.name if isinstance(entry, ComputeDomainNode) else entry.node_name


def only_reports_differ(
    published: Mapping[str, Sequence[ComputeDomainDaemonInfo]],
    desired: Mapping[str, Sequence[ComputeDomainDaemonInfo]],
    current: ComputeDomainStatus | None,
    wanted: ComputeDomainStatus,
) -> bool:
    """Whether the cliques and the status differ from what is published in daemons' reports alone.

    Such a change (``imexPeers`` and the ``IMEXPeersConnected`` condition) may wait to be gathered with
    the other daemons' reports; every other change is what daemons, plugins and ``kubectl wait`` act on.
    """
    if current is None or current.status != wanted.status or published.keys() != desired.keys():
        return False
    if any(_unreported(published[key]) != _unreported(desired[key]) for key in desired):
        return False
    if _unreported(current.nodes) != _unreported(wanted.nodes):
        return False
    others = [c for c in current.conditions if c.type != IMEX_PEERS_CONNECTED]
    if others != [c for c in wanted.conditions if c.type != IMEX_PEERS_CONNECTED]:
        return False
    # Something must differ at all: an owners-only clique patch is not a report.
    return (
        any(list(published[key]) != list(desired[key]) for key in desired)
        or {n.name: n for n in current.nodes} != {n.name: n for n in wanted.nodes}
        or condition_of_status(current) != condition_of_status(wanted)
    )


def any_reported(entries: Iterable[ComputeDomainNode | ComputeDomainDaemonInfo]) -> bool:
    """Whether any entry carries ``imexPeers``."""
    return any(_peers(e) is not None for e in entries)


class ImexHealth:
    """The IMEX-health part of one controller's sync: condition, events, metrics, schema guard."""

    def __init__(self, events: EventRecorder) -> None:
        self._events = events
        self.guard = FieldGuard()
        self._series: dict[str, set[tuple[str, str, str]]] = {}

    def members(self, members: list[DaemonPod]) -> list[DaemonPod]:
        """The members as the sync should publish them: without reports once the guard tripped."""
        if self.guard.kept:
            return members
        return [dataclasses.replace(m, imex_peers=None) if m.imex_peers else m for m in members]

    def after_write(
        self,
        written: KubeObject,
        sent: Iterable[ComputeDomainNode | ComputeDomainDaemonInfo],
        stored: Iterable[ComputeDomainNode | ComputeDomainDaemonInfo],
    ) -> None:
        """After a clique or status write: trip the guard if the entries ``sent`` lost their reports."""
        self.guard.check(object_key(written), sent=any_reported(sent), stored=any_reported(stored))

    def conditions(
        self, cd: ComputeDomain, base: Sequence[Condition], nodes: Sequence[ComputeDomainNode], now: datetime
    ) -> list[Condition]:
        """``base`` plus the domain's ``IMEXPeersConnected`` condition, when it has one."""
        if not self.guard.kept:
            return list(base)
        generation = (cd.metadata.generation if cd.metadata is not None else None) or 0
        return with_condition(base, peers_condition(condition_of(cd), nodes, now=now, generation=generation))

    def record_change(self, cd: ComputeDomain, conditions: Sequence[Condition]) -> None:
        """Before a status write: the event for a changed set of broken pairs, or for their repair."""
        new = next((c for c in conditions if c.type == IMEX_PEERS_CONNECTED), None)
        old = condition_of(cd)
        if new is None:
            return
        if new.status == ConditionStatus.FALSE and (
            old is None or old.status != new.status or old.message != new.message
        ):
            self._events.record(
                cd,
                type="Warning",
                reason=reasons.IMEX_PEERS_NOT_CONNECTED,
                action="ObserveIMEX",
                note=new.message,
            )
        elif new.status == ConditionStatus.TRUE and old is not None and old.status == ConditionStatus.FALSE:
            self._events.record(
                cd, type="Normal", reason=reasons.IMEX_PEERS_CONNECTED, action="ObserveIMEX", note=new.message
            )

    def observe(self, uid: str, cd: ComputeDomain, nodes: Sequence[ComputeDomainNode]) -> None:
        """Set the gauges of the domain's reporting nodes and drop those of nodes gone or silent."""
        meta = cd.metadata
        namespace, name = (meta.namespace or "", meta.name or "") if meta is not None else ("", "")
        current: set[tuple[str, str, str]] = set()
        for node in nodes:
            peers = _peers(node)
            if peers is None:
                continue
            labels = (namespace, name, node.name)
            current.add(labels)
            PEERS_CONNECTED.labels(*labels).set(peers.connected)
            PEERS_EXPECTED.labels(*labels).set(peers.expected)
        for labels in self._series.get(uid, set()) - current:
            PEERS_CONNECTED.remove(*labels)
            PEERS_EXPECTED.remove(*labels)
        if current:
            self._series[uid] = current
        else:
            self._series.pop(uid, None)

    def forget(self, uid: str) -> None:
        """Drop the gauges of a finalized domain."""
        for labels in self._series.pop(uid, set()):
            PEERS_CONNECTED.remove(*labels)
            PEERS_EXPECTED.remove(*labels)
