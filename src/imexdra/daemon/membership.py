"""Who is in this daemon's IMEX domain, as the controller published it (pure functions).

The controller is the single writer of membership (docs/architecture.md §5): it derives one entry per
daemon pod (node = ``spec.nodeName``, IP = ``status.podIP``, readiness = the pod's Ready condition),
assigns each a stable per-clique index, and writes the entries into the ComputeDomainClique
``<CD UID>.<clique ID>`` (or, with ``ComputeDomainCliques`` off, into ``ComputeDomain.status.nodes``).
The daemon only reads them. Its own entry is the one with its node name *and* its pod IP: an entry of
its node carrying another IP belongs to a predecessor pod the controller has not replaced yet.

A ``Membership`` keeps only what IMEX's configuration depends on (node, IP, index), so readiness flips
of peers do not cause work downstream.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from imexdra.api.computedomain import ComputeDomain
from imexdra.api.computedomainclique import ComputeDomainClique
from imexdra.api.constants import COMPUTE_DOMAIN_LABEL_KEY


@dataclass(frozen=True, slots=True)
class Identity:
    """The daemon itself: its node, pod IP, clique and ComputeDomain."""

    node_name: str
    pod_ip: str
    clique_id: str
    compute_domain_uid: str


@dataclass(frozen=True, slots=True)
class Peer:
    """One daemon of the clique (this one included)."""

    node_name: str
    ip: str
    index: int


@dataclass(frozen=True, slots=True)
class Membership:
    """The daemons of this daemon's clique, sorted by index, and which one is this daemon."""

    peers: tuple[Peer, ...] = ()
    own: Peer | None = None
    #: ``spec.numNodes`` when known: IP mode waits for exactly this many daemons (0 = do not wait).
    expected: int = 0


def _membership(entries: Iterable[tuple[str, str, str, int]], me: Identity, expected: int) -> Membership:
    peers = sorted(
        (Peer(node, ip, index) for node, ip, clique, index in entries if clique == me.clique_id),
        key=lambda peer: (peer.index, peer.node_name),
    )
    own = next((p for p in peers if p.node_name == me.node_name and p.ip == me.pod_ip), None)
    return Membership(peers=tuple(peers), own=own, expected=expected)


def belongs_to(labels: dict[str, str] | None, me: Identity) -> bool:
    """Whether an object labelled ``labels`` belongs to this daemon's ComputeDomain."""
    return (labels or {}).get(COMPUTE_DOMAIN_LABEL_KEY) == me.compute_domain_uid


def membership_from_clique(clique: ComputeDomainClique | None, me: Identity) -> Membership:
    """Members from the clique object (None: it does not exist yet, so nobody is a member)."""
    if clique is None:
        return Membership()
    entries = ((d.node_name, d.ip_address, d.clique_id, d.index) for d in clique.daemons)
    return _membership(entries, me, expected=0)


def membership_from_compute_domain(compute_domain: ComputeDomain | None, me: Identity) -> Membership:
    """Members from ``status.nodes`` (gate ``ComputeDomainCliques`` off), with ``numNodes``."""
    if compute_domain is None:
        return Membership()
    status = compute_domain.status
    nodes = status.nodes if status is not None else []
    expected = compute_domain.spec.num_nodes if compute_domain.spec is not None else 0
    entries = ((n.name, n.ip_address, n.clique_id, n.index) for n in nodes)
    return _membership(entries, me, expected=expected)
