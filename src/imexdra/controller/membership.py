"""Who belongs to a ComputeDomain, at which index, and what its status says: the pure core of the sync.

Inputs are the domain's live daemon pods (``daemons.DaemonPod``) and the entries currently published
(clique objects, or ``status.nodes`` with the cliques gate off); outputs are the entries to publish.

Index rules (the central assignment upstream issue #1107 asks for; contract in ``daemons``):

- a node that already has a valid entry keeps its index (a valid index is ``0 <= i < max`` and not
  already claimed by an entry sorted before it, so a corrupted list heals deterministically);
- every other member gets the lowest free index, in node-name order;
- members that do not fit stay unplaced (upstream's daemon blocked forever; here an Event says so).

Each fabric entry carries its daemon's last ``imexPeers`` report (docs/imex-health.md), if it made one.

Global status (docs/data-path.md §9.3): host-managed → Ready; otherwise NotReady if fewer nodes
than ``spec.numNodes`` or any node NotReady, else Ready.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from msgspec import UNSET

from imexdra.api.computedomain import ComputeDomainNode
from imexdra.api.computedomainclique import ComputeDomainDaemonInfo
from imexdra.api.constants import ComputeDomainStatusValue
from imexdra.controller.daemons import DaemonPod

READY = ComputeDomainStatusValue.READY
NOT_READY = ComputeDomainStatusValue.NOT_READY
#: ``index`` of a node without an NVLink fabric.
NON_FABRIC_INDEX = -1


@dataclass(frozen=True, slots=True)
class CliqueMembers:
    """The entries one clique should publish, and the members left without an index."""

    clique_id: str
    daemons: tuple[ComputeDomainDaemonInfo, ...]
    unplaced: tuple[str, ...] = ()


def _status(ready: bool) -> ComputeDomainStatusValue:
    return READY if ready else NOT_READY


def assign_indices(
    clique_id: str,
    existing: Iterable[ComputeDomainDaemonInfo],
    members: Iterable[DaemonPod],
    *,
    max_nodes: int,
) -> CliqueMembers:
    """Entries for ``members`` of one clique, keeping the indices ``existing`` entries gave their nodes."""
    previous: dict[str, int] = {}
    claimed: set[int] = set()
    for entry in sorted(existing, key=lambda e: (e.index, e.node_name)):
        valid = 0 <= entry.index < max_nodes and entry.index not in claimed
        if valid and entry.node_name not in previous:
            previous[entry.node_name] = entry.index
            claimed.add(entry.index)
    ordered = sorted(members, key=lambda m: m.node_name)
    indices = {m.node_name: previous[m.node_name] for m in ordered if m.node_name in previous}
    used = set(indices.values())
    free = (i for i in range(max_nodes) if i not in used)
    unplaced: list[str] = []
    for member in ordered:
        if member.node_name in indices:
            continue
        index = next(free, None)
        if index is None:
            unplaced.append(member.node_name)
        else:
            indices[member.node_name] = index
    daemons = [
        ComputeDomainDaemonInfo(
            node_name=m.node_name,
            ip_address=m.ip_address,
            clique_id=clique_id,
            index=indices[m.node_name],
            status=_status(m.ready),
            imex_peers=m.imex_peers if m.imex_peers is not None else UNSET,
        )
        for m in ordered
        if m.node_name in indices
    ]
    daemons.sort(key=lambda d: d.index)
    return CliqueMembers(clique_id, tuple(daemons), tuple(unplaced))


def group_by_clique(members: Iterable[DaemonPod]) -> tuple[dict[str, list[DaemonPod]], list[DaemonPod]]:
    """Split announced members into fabric members by clique ID and non-fabric members."""
    fabric: dict[str, list[DaemonPod]] = {}
    non_fabric: list[DaemonPod] = []
    for member in members:
        if member.clique_id is None:
            continue
        if member.clique_id:
            fabric.setdefault(member.clique_id, []).append(member)
        else:
            non_fabric.append(member)
    return fabric, non_fabric


def plan_cliques(
    members: Iterable[DaemonPod],
    published: Mapping[str, Sequence[ComputeDomainDaemonInfo]],
    *,
    max_nodes: int,
) -> tuple[dict[str, CliqueMembers], list[DaemonPod]]:
    """Desired entries of every clique with members (keyed by clique ID), and the non-fabric members."""
    fabric, non_fabric = group_by_clique(members)
    cliques = {
        clique_id: assign_indices(clique_id, published.get(clique_id, ()), pods, max_nodes=max_nodes)
        for clique_id, pods in sorted(fabric.items())
    }
    return cliques, non_fabric


def status_nodes(
    cliques: Mapping[str, CliqueMembers], non_fabric: Iterable[DaemonPod]
) -> list[ComputeDomainNode]:
    """``status.nodes``: every clique's entries (by clique ID, then index), then the non-fabric nodes."""
    nodes = [
        ComputeDomainNode(
            name=d.node_name,
            ip_address=d.ip_address,
            clique_id=d.clique_id,
            index=d.index,
            status=d.status,
            imex_peers=d.imex_peers,
        )
        for clique_id in sorted(cliques)
        for d in cliques[clique_id].daemons
    ]
    nodes.extend(
        ComputeDomainNode(
            name=m.node_name,
            ip_address=m.ip_address,
            clique_id="",
            index=NON_FABRIC_INDEX,
            status=_status(m.ready),
        )
        for m in sorted(non_fabric, key=lambda m: m.node_name)
    )
    return nodes


def published_from_status(nodes: Iterable[ComputeDomainNode]) -> dict[str, list[ComputeDomainDaemonInfo]]:
    """Entries by clique ID as ``status.nodes`` publishes them (the cliques-gate-off source of indices)."""
    published: dict[str, list[ComputeDomainDaemonInfo]] = {}
    for node in nodes:
        if node.clique_id:
            published.setdefault(node.clique_id, []).append(
                ComputeDomainDaemonInfo(
                    node_name=node.name,
                    ip_address=node.ip_address,
                    clique_id=node.clique_id,
                    index=node.index,
                    status=node.status,
                )
            )
    return published


def global_status(nodes: Sequence[ComputeDomainNode], *, num_nodes: int) -> ComputeDomainStatusValue:
    """Upstream's ``calculateGlobalStatus`` for driver-managed IMEX (host-managed: see ``sync``)."""
    if len(nodes) < num_nodes or any(n.status == NOT_READY for n in nodes):
        return NOT_READY
    return READY


def cliques_carry_the_change(
    current: Iterable[ComputeDomainNode], desired: Iterable[ComputeDomainNode]
) -> bool:
    """Whether every entry that differs between the two lists is a fabric node's (a clique publishes it).

    Such a change of ``status.nodes`` is only the roll-up of the cliques and can wait; a change of a
    non-fabric node's entry cannot, since ``status.nodes`` is where its readiness is read
    (docs/architecture.md §5.1).
    """
    old = {n.name: n for n in current}
    new = {n.name: n for n in desired}
    changed = [
        entry
        for name in old.keys() | new.keys()
        if old.get(name) != new.get(name)
        for entry in (old.get(name), new.get(name))
        if entry is not None
    ]
    return all(entry.clique_id for entry in changed)


def same_nodes(a: Iterable[ComputeDomainNode], b: Iterable[ComputeDomainNode]) -> bool:
    """Equal as maps keyed by node name (order-insensitive, full-entry equality), like upstream."""
    return {n.name: n for n in a} == {n.name: n for n in b}
