"""IMEX peer health: what one node's IMEX daemon says about its connections to the others.

Each compute-domain daemon asks its own IMEX daemon for its connectivity table
(``nvidia-imex-ctl -N``, docs/hardware.md §7.2) and reduces it to an ``ImexPeers`` summary: how many
of the other members of its clique it is connected to, how many there are, and, for each one it is
not connected to, that peer's node and IMEX's state code. The daemon puts the summary on its own pod
as the annotation ``IMEX_PEERS_ANNOTATION`` (a daemon writes only its own pod); the controller copies
it into the node's clique entry and ``status.nodes`` entry as ``imexPeers`` and rolls it up into the
domain condition ``IMEXPeersConnected`` (docs/imex-health.md).

``imexPeers`` is ours and additive: absent (``UNSET``) until a daemon has reported, so an entry
without it is byte for byte upstream's.
"""

from __future__ import annotations

from typing import Annotated, Final

import msgspec

NonNegativeInt = Annotated[int, msgspec.Meta(ge=0)]

#: The annotation a daemon keeps its latest ``ImexPeers`` in (compact JSON), on its own pod.
IMEX_PEERS_ANNOTATION: Final = "resource.nvidia.com/imexPeers"
#: The ComputeDomain condition that rolls up every node's ``imexPeers``.
IMEX_PEERS_CONNECTED: Final = "IMEXPeersConnected"
#: A daemon writes its summary at most once per this many polls; the controller publishes a domain's
#: summaries no more often either, so N daemons cost the shared objects what one does
#: (docs/imex-health.md §3).
REPORT_SPACING_POLLS: Final = 3

#: IMEX's connection state codes as ``nvidia-imex-ctl -N`` prints them, and what they mean.
CONNECTED: Final = "C"
STATE_MEANINGS: Final = {
    "C": "connected",
    "R": "recovering: connection lost, clean-up not yet triggered",
    "D": "disconnected: connection lost, clean-up triggered",
    "N": "never connected",
    "I": "invalid: not reachable, no status",
    "A": "authenticating",
    "!V!": "version mismatch",
    "!M!": "node map mismatch",
    "?": "not in IMEX's node list yet",
}


def state_meaning(state: str) -> str:
    """A state code in words (the code itself when IMEX printed one we do not know)."""
    return STATE_MEANINGS.get(state, state)


class PeerLink(msgspec.Struct, kw_only=True, frozen=True):
    """A peer this node's IMEX daemon is not connected to, and IMEX's state code for it."""

    node_name: str = msgspec.field(name="nodeName")
    state: str


class ImexPeers(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One node's view of its IMEX peers (the other members of its clique)."""

    connected: NonNegativeInt
    expected: NonNegativeInt
    #: The peers not connected, by node name; empty (left out) when all are.
    not_connected: list[PeerLink] = msgspec.field(name="notConnected", default_factory=list)

    @property
    def healthy(self) -> bool:
        """Connected to every expected peer."""
        return self.connected >= self.expected and not self.not_connected


def encode_annotation(peers: ImexPeers) -> str:
    """The annotation value: compact JSON."""
    return msgspec.json.encode(peers).decode()


def decode_annotation(value: str | None) -> ImexPeers | None:
    """The annotation's ``ImexPeers``; None when absent or not a valid summary (an odd pod is ignored)."""
    if not value:
        return None
    try:
        return msgspec.json.decode(value, type=ImexPeers)
    except (msgspec.ValidationError, msgspec.DecodeError):
        return None
