"""Isolation switched back to ``domain``: the domains still made under ``channel``, and who waits for them.

docs/channel-isolation.md §7: the two kinds of domain never run side by side. Under channel isolation
``isolation.ChannelAssigner`` holds new domains back while domains made under ``domain`` live; this is
the other direction. Under ``domain`` isolation a domain made under ``channel`` is one that records
``status.channel``; such a domain gets ``IsolationMismatch`` (the reconciler), and while any of them is
still in the API (Terminating ones included: their pods may still hold their channels) a domain that
has no workload template yet is held NotReady with ``IsolationSwitchPending``. When the last one is
gone, the held domains are requeued. Fed by the ComputeDomain informer; no I/O.
"""

from __future__ import annotations

from collections.abc import Callable

from imexdra.api.computedomain import ComputeDomain
from imexdra.controller import reasons
from imexdra.controller.isolation import Verdict


def _uid(cd: ComputeDomain) -> str | None:
    return cd.metadata.uid if cd.metadata is not None and cd.metadata.uid else None


def records_channel(cd: ComputeDomain) -> bool:
    """Whether the domain records a channel number, i.e. was made under channel isolation."""
    return cd.status is not None and cd.status.channel is not None


class ChannelKindDomains:
    """The live domains made under ``channel`` isolation, seen while the driver runs ``domain``.

    Args:
        requeue: queue a held domain (by UID) for reconcile once no channel-kind domain is left.

    """

    def __init__(self, *, requeue: Callable[[str], None]) -> None:
        self._requeue = requeue
        #: UIDs of the domains that record a channel number.
        self._channel_kind: set[str] = set()
        #: UIDs of the domains held back until ``_channel_kind`` is empty.
        self._held: set[str] = set()

    def domain_seen(self, cd: ComputeDomain) -> None:
        """A domain added or updated."""
        uid = _uid(cd)
        if uid is None:
            return
        if records_channel(cd):
            self._channel_kind.add(uid)
        else:
            self._forget(uid)

    def domain_gone(self, cd: ComputeDomain) -> None:
        """A domain deleted from the API."""
        uid = _uid(cd)
        if uid is not None:
            self._held.discard(uid)
            self._forget(uid)

    def hold(self, cd: ComputeDomain) -> Verdict | None:
        """``IsolationSwitchPending`` for a new domain while channel-kind domains live, else None."""
        uid = _uid(cd)
        if uid is None or not self._channel_kind - {uid}:
            if uid is not None:
                self._held.discard(uid)
            return None
        self._held.add(uid)
        return Verdict(
            None,
            False,
            reasons.ISOLATION_SWITCH_PENDING,
            f'{len(self._channel_kind)} ComputeDomain(s) made under isolation "channel" still live; this '
            "one gets its workload template once they are gone",
        )

    def _forget(self, uid: str) -> None:
        if uid not in self._channel_kind:
            return
        self._channel_kind.discard(uid)
        if not self._channel_kind:
            for held in sorted(self._held):
                self._requeue(held)
            self._held.clear()
