"""Channel isolation in the reconcile: which IMEX channel a live domain has, or why it has none.

Under ``imex.isolation: channel`` (docs/channel-isolation.md §4, §7) ``ChannelAssigner`` keeps the
channel book (``channels``) in step with the informers — every live domain and the numbers claims
hold (``claimholds``) — and gives the reconciler a ``Verdict`` per domain, synchronously, so that a
number is picked and reserved with no ``await`` in between. The reconciler then writes the number in
the domain's status before it renders the template (write order in ``reconciler``).

No number, and no template, for a domain that:

- asks for ``allocationMode: All`` (``AllocationModeUnsupported``);
- was made under ``domain`` isolation: its template is on the default channel class, whatever its
  status records (``IsolationMismatch``); while such a domain lives, new domains wait
  (``IsolationSwitchPending``);
- finds every number taken (``ChannelsExhausted``); waiting domains are requeued oldest first
  whenever a number may have come free;
- records a number outside the pool (``ChannelOutOfPool``), or shares its number with an older domain
  while a claim holds it for it (``ChannelConflict``). A younger duplicate no claim uses is given a
  new number instead.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from imexdra.api.computedomain import ComputeDomain
from imexdra.api.constants import AllocationMode
from imexdra.common.machinery.events import and_more
from imexdra.controller import reasons
from imexdra.controller.channels import FIRST_CHANNEL, ChannelBook, LiveDomain
from imexdra.controller.claimholds import ChannelClaim, claim_uid
from imexdra.controller.metrics import publish_channel_book
from imexdra.controller.render import domain_uid

#: The condition type channel isolation sets on every domain.
CHANNEL_ALLOCATED = "ChannelAllocated"
#: How many holders an exhaustion event names before it only counts the rest.
NAMED_HOLDERS = 10

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Verdict:
    """What channel isolation says about one live domain."""

    #: The number to record in ``status.channel`` (kept as recorded when not ``allocated``).
    channel: int | None
    #: The domain has its own number: its template may be rendered and it may become Ready.
    allocated: bool
    #: The ``ChannelAllocated`` condition's reason, and its message (also a Warning event's note).
    reason: str
    message: str
    #: The Warning event's note when it says more than the condition (which stays stable).
    note: str = ""


def _created(cd: ComputeDomain) -> datetime:
    stamp = cd.metadata.creationTimestamp if cd.metadata else None
    return stamp if stamp is not None else _EPOCH


def _namespace(cd: ComputeDomain) -> str:
    return (cd.metadata.namespace if cd.metadata else None) or ""


def _live(cd: ComputeDomain) -> LiveDomain:
    channel = cd.status.channel if cd.status else None
    return LiveDomain(domain_uid(cd), _created(cd), channel, namespace=_namespace(cd))


class ChannelAssigner:
    """The channel book fed by the informers, and a verdict per domain for the reconciler.

    Args:
        pool_size: channels ``0 .. pool_size - 1`` exist on every node (``--imex-channel-count``).
        name_of: ``namespace/name`` of a domain by UID, if cached (for messages and requeues).
        requeue: queue a domain's key for reconcile (waiting domains when a number may be free).

    """

    def __init__(
        self, pool_size: int, *, name_of: Callable[[str], str | None], requeue: Callable[[str], None]
    ) -> None:
        self.book = ChannelBook(pool_size)
        publish_channel_book(self.book)
        self._name_of = name_of
        self._requeue = requeue
        #: Domains without a number, by UID, with their creation time: requeued oldest first.
        self._waiting: dict[str, datetime] = {}
        #: Live domains made under ``domain`` isolation (new domains wait until none is left).
        self._old_kind: set[str] = set()

    # -- informer events ---------------------------------------------------------------------------

    def domain_seen(self, cd: ComputeDomain) -> None:
        """A domain added or updated (its recorded number, if any, goes into the book)."""
        if cd.metadata is not None and cd.metadata.uid:
            self.book.record(_live(cd))

    def domain_gone(self, cd: ComputeDomain) -> None:
        """A domain deleted from the API: its number is free once no claim holds it."""
        if cd.metadata is None or not cd.metadata.uid:
            return
        uid = cd.metadata.uid
        self.book.forget(uid)
        self._waiting.pop(uid, None)
        self._old_kind.discard(uid)
        self._wake()

    def claim_seen(self, claim: ChannelClaim) -> None:
        """A claim added or updated: the numbers it holds now (none releases what it held)."""
        uid = claim_uid(claim)
        if uid is None:
            return
        if claim.hold is None:
            self.book.release(uid)
            self._wake()
        else:
            self.book.hold(uid, claim.hold)

    def claim_gone(self, claim: ChannelClaim) -> None:
        """A claim deleted from the API: its numbers are no longer held by it."""
        uid = claim_uid(claim)
        if uid is not None:
            self.book.release(uid)
            self._wake()

    def mark_old_kind(self, uid: str) -> None:
        """A live domain made under ``domain`` isolation, found before it is reconciled (startup)."""
        self._old_kind.add(uid)

    # -- the reconciler's questions ----------------------------------------------------------------

    def decide(self, cd: ComputeDomain, *, domain_kind_template: bool) -> Verdict:
        """The domain's verdict; reserves a number in the book when it picks one (no I/O, no await).

        ``domain_kind_template``: the domain has a live workload template on the default (channel 0)
        class, i.e. it was made under ``domain`` isolation (channel isolation renders the channel class),
        even if its status records a number (its pods would use channel 0 all the same).
        """
        uid = domain_uid(cd)
        self.book.record(_live(cd))
        if cd.spec is not None and cd.spec.channel.allocation_mode == AllocationMode.ALL:
            return self._refuse(
                reasons.ALLOCATION_MODE_UNSUPPORTED,
                "allocationMode All is not supported under channel isolation (every channel contradicts "
                "a channel of its own): recreate the ComputeDomain with allocationMode Single",
            )
        channel = self.book.channel_of(uid)
        if domain_kind_template:
            self._old_kind.add(uid)
            return self._refuse(
                reasons.ISOLATION_MISMATCH,
                'created under isolation "domain", the driver now runs "channel": delete and recreate '
                "it, or set isolation back",
            )
        self._old_kind.discard(uid)
        if channel is not None:
            refused = self._check_recorded(cd, channel)
            if refused is not None:
                return refused
            channel = self.book.channel_of(uid)
        if channel is None:
            if self._old_kind:
                self._waiting[uid] = _created(cd)  # woken when an old-kind domain is gone
                return self._refuse(
                    reasons.ISOLATION_SWITCH_PENDING,
                    f'{len(self._old_kind)} ComputeDomain(s) made under isolation "domain" still live; '
                    "this one gets its channel once they are gone",
                )
            channel = self.book.allocate(uid)
            if channel is None:
                self._waiting[uid] = _created(cd)
                pool = self.book.pool_size - 1
                return Verdict(
                    None,
                    False,
                    reasons.CHANNELS_EXHAUSTED,
                    f"all {pool} IMEX channels are taken; waiting for one to come free",
                    self._exhausted_note(_namespace(cd)),
                )
        self._waiting.pop(uid, None)
        return Verdict(channel, True, reasons.CHANNEL_ALLOCATED, f"IMEX channel {channel}")

    def reservation_failed(self, uid: str) -> None:
        """The status write that was to record the domain's new number failed: release the number."""
        self.book.forget(uid)
        self._wake()

    # -- internals ---------------------------------------------------------------------------------

    def _check_recorded(self, cd: ComputeDomain, channel: int) -> Verdict | None:
        """A refusal for a recorded number out of the pool or in conflict; None if it stands.

        A younger duplicate no claim uses loses its number here (the caller then allocates anew).
        """
        uid = domain_uid(cd)
        if not FIRST_CHANNEL <= channel < self.book.pool_size:
            return self._refuse(
                reasons.CHANNEL_OUT_OF_POOL,
                f"status.channel {channel} is outside the channel pool 1..{self.book.pool_size - 1} "
                "(was the channel count lowered?); it is not reassigned: recreate the ComputeDomain",
                channel=channel,
            )
        conflict = self.book.conflict_of(channel)
        if conflict is None:
            return None
        if uid in conflict.reassignable:
            self.book.forget(uid)
            self.book.record(replace(_live(cd), channel=None))
            return None
        if not conflict.stuck:
            return None  # the keeper: its younger twins are being given new numbers
        others = [other for other in (conflict.keeper, *conflict.stuck) if other != uid]
        named = sorted(name for other in others if (name := self._describe(other, _namespace(cd))))
        hidden = len(others) - len(named)
        holders = named + ([f"{hidden} ComputeDomain(s) of other namespaces"] if hidden else [])
        advice = "delete one of the ComputeDomains" if not hidden else "delete this ComputeDomain"
        return self._refuse(
            reasons.CHANNEL_CONFLICT,
            f"channel {channel} is also recorded by {', '.join(holders)} and claims use it: {advice}",
            channel=channel,
        )

    @staticmethod
    def _refuse(reason: str, message: str, *, channel: int | None = None) -> Verdict:
        return Verdict(channel, False, reason, message)

    def _exhausted_note(self, namespace: str) -> str:
        """Who holds the pool, as a domain of ``namespace`` may read it: its own namespace's by name."""
        recorded = sorted(self.book.recorded().items(), key=lambda item: item[1])
        own = [(name, channel) for uid, channel in recorded if (name := self._describe(uid, namespace))]
        named = [f"{name} ({channel})" for name, channel in own[:NAMED_HOLDERS]]
        holders = and_more(named, len(own))
        others = len(recorded) - len(own)
        if others:
            holders += (", " if holders else "") + f"{others} ComputeDomain(s) of other namespaces"
        by_claims = sum(1 for n in range(FIRST_CHANNEL, self.book.pool_size) if self.book.holders(n))
        return (
            f"all {self.book.pool_size - 1} IMEX channels (1..{self.book.pool_size - 1}) are taken; "
            f"held by {holders or 'no live ComputeDomain'}"
            + (f"; {by_claims} still held by claims" if by_claims else "")
            + "; waiting for one to come free"
        )

    def _describe(self, uid: str, namespace: str) -> str | None:
        """``namespace/name`` of a domain of ``namespace``; None for any other (docs/tenancy.md)."""
        key = self._name_of(uid)
        return key if key is not None and key.startswith(f"{namespace}/") else None

    def _wake(self) -> None:
        for uid in sorted(self._waiting, key=lambda uid: (self._waiting[uid], uid)):
            key = self._name_of(uid)
            if key is not None:
                self._requeue(key)
