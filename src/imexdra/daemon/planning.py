"""What to do when membership changes: which files to rewrite and what to tell IMEX (pure).

IMEX reads its config and node list only at start; SIGUSR1 makes it re-read the node list and
re-resolve names without losing its state (docs/hardware.md §7.1). Hence, per mode (docs/data-path.md §9.4):

- DNS names (gate ``IMEXDaemonsWithDNSNames``): ``nodes.cfg`` is static; the hosts file maps every
  slot, a peer's to its IP and an unused one to ``UNUSED_SLOT_ADDRESS`` (upstream #1465); a
  membership change is a hosts-file rewrite and a *reload* (SIGUSR1). The exception is a change of
  this daemon's own index: IMEX fixes its node ID at start, so a reload would leave it answering
  under the wrong ID (upstream issue #1418); that is a *restart*. IMEX is *started* once this
  daemon's own entry exists, without waiting for peers.
- IP addresses (gate off): ``nodes.cfg`` lists the peers' IPs, so any change is a *restart*; IMEX
  starts only once exactly ``numNodes`` daemons are listed, when ``numNodes`` is set.

Until this daemon's own entry is published nothing is written or started.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from imexdra.daemon.imexconfig import UNUSED_SLOT_ADDRESS, dns_name, ip_nodes_config
from imexdra.daemon.membership import Membership, Peer


class Action(enum.Enum):
    """What the supervisor is asked to do after the files are written."""

    NONE = "none"
    START = "start"
    RELOAD = "reload"
    RESTART = "restart"


@dataclass(frozen=True, slots=True)
class Applied:
    """What IMEX was last given (the state the next plan is computed against)."""

    started: bool = False
    own_index: int | None = None
    #: Hosts-file mappings last written; None = never written by this process (write the first time).
    hosts: dict[str, str] | None = None
    nodes_config: str | None = None


@dataclass(frozen=True, slots=True)
class Plan:
    """Files to write (None = leave as is), the action, and the state once applied."""

    action: Action
    reason: str
    applied: Applied
    hosts: dict[str, str] | None = None
    nodes_config: str | None = None
    #: Entries ignored because their index cannot name a DNS slot (a controller bug, logged).
    invalid: tuple[Peer, ...] = field(default=())


def plan_dns(applied: Applied, membership: Membership, *, domain_uid: str, max_nodes: int) -> Plan:
    """The plan for DNS-names mode, naming the slots of the domain with UID ``domain_uid``."""
    valid = tuple(p for p in membership.peers if 0 <= p.index < max_nodes)
    invalid = tuple(p for p in membership.peers if p not in valid)
    own = membership.own
    if own is None or own not in valid:
        return Plan(Action.NONE, "waiting for this daemon's entry", applied, invalid=invalid)
    ips = {peer.index: peer.ip for peer in valid}
    mapping = {dns_name(domain_uid, i): ips.get(i, UNUSED_SLOT_ADDRESS) for i in range(max_nodes)}
    hosts = mapping if mapping != applied.hosts else None
    new = Applied(started=True, own_index=own.index, hosts=mapping, nodes_config=applied.nodes_config)
    if not applied.started:
        action, reason = Action.START, "first membership including this daemon"
    elif own.index != applied.own_index:
        action, reason = Action.RESTART, f"own index changed from {applied.own_index} to {own.index}"
    elif hosts is not None:
        action, reason = Action.RELOAD, "peer mappings changed"
    else:
        action, reason = Action.NONE, "no change affecting IMEX"
    return Plan(action, reason, new, hosts=hosts, invalid=invalid)


def plan_ip(applied: Applied, membership: Membership) -> Plan:
    """The plan for IP mode."""
    own = membership.own
    if own is None:
        return Plan(Action.NONE, "waiting for this daemon's entry", applied)
    if membership.expected and len(membership.peers) != membership.expected:
        reason = f"waiting for numNodes: {membership.expected}, nodes seen: {len(membership.peers)}"
        return Plan(Action.NONE, reason, applied)
    nodes_config = ip_nodes_config(peer.ip for peer in membership.peers)
    new = Applied(started=True, own_index=own.index, hosts=applied.hosts, nodes_config=nodes_config)
    if not applied.started:
        return Plan(Action.START, "all expected daemons listed", new, nodes_config=nodes_config)
    if nodes_config != applied.nodes_config:
        return Plan(Action.RESTART, "node list changed", new, nodes_config=nodes_config)
    return Plan(Action.NONE, "no change affecting IMEX", new)
