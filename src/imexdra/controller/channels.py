"""The IMEX channel numbers of channel-isolated ComputeDomains: bookkeeping only, no I/O.

Under ``imex.isolation: channel`` every live ComputeDomain gets a number of its own from
``1 .. pool_size - 1`` (channel 0 stays the shared domain-mode channel), recorded by the controller in
the domain's status (docs/channel-isolation.md §2, §4). ``ChannelBook`` answers which number a domain
gets; the reconciler feeds it what the informers show and writes what it answers:

- ``record`` / ``forget``: a live domain and the number its status records (or that the book has just
  reserved for it), and a domain that is gone;
- ``hold`` / ``release``: the numbers a ResourceClaim's allocation still holds on some node, and the
  claim gone from the API. A held number is never handed out, whoever held it;
- ``allocate``: the domain's number, or the lowest one that no live domain records and no claim
  holds; ``None`` when the pool is exhausted;
- ``conflicts`` and ``invalid``: what must never happen but a restore or a late write from a former
  leader can produce — two live domains recording one number, a number outside the pool.

The book is rebuilt from the API after a restart or failover (``ChannelBook.rebuild``); it keeps no
state of its own worth saving. It is not thread-safe and need not be: the controller runs one event
loop, and ``allocate`` reserves the number it returns before anything can ``await``, so two workers
never get the same number.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime

from imexdra.common.errors import ConfigError

#: The lowest number handed out; 0 is the channel every domain shares under ``domain`` isolation.
FIRST_CHANNEL = 1


@dataclass(frozen=True, slots=True)
class LiveDomain:
    """A ComputeDomain that exists (Terminating ones included) and the number its status records."""

    uid: str
    created: datetime
    #: ``status.channel``; ``None`` while the domain has none.
    channel: int | None = None
    #: The domain's namespace: only claims of this namespace use its number (docs/tenancy.md).
    namespace: str = field(kw_only=True)


@dataclass(frozen=True, slots=True)
class ClaimHold:
    """The channel numbers a ResourceClaim's allocation holds, and the domain its config names."""

    #: The ``domainID`` of the claim's ComputeDomainChannelConfig; ``None`` for a claim without one.
    domain: str | None
    channels: frozenset[int]
    #: The claim's namespace: it uses the number for ``domain`` only if that domain lives there.
    namespace: str


@dataclass(frozen=True, slots=True)
class Conflict:
    """One number recorded by several live domains, and what may be done about it.

    The oldest domain (creation time, then UID) keeps the number. Each younger one may be given a new
    number only while no claim holds this number for it; otherwise it is ``stuck`` and must be
    reported, never silently moved (its pods already use the number).
    """

    channel: int
    keeper: str
    reassignable: tuple[str, ...]
    stuck: tuple[str, ...]


class ChannelBook:
    """Which live domain records which number, and which numbers claims still hold."""

    def __init__(self, pool_size: int) -> None:
        """An empty book over channels ``0 .. pool_size - 1``; ``ConfigError`` if none is left to hand out."""
        if pool_size <= FIRST_CHANNEL:
            raise ConfigError(f"an IMEX channel pool of {pool_size} leaves no channel besides channel 0")
        self.pool_size = pool_size
        self._domains: dict[str, LiveDomain] = {}
        self._owners: dict[int, set[str]] = {}
        self._claims: dict[str, ClaimHold] = {}
        self._holders: dict[int, set[str]] = {}
        #: Every number below this one is taken (the lowest free number is this one or above it).
        self._lowest_maybe_free = FIRST_CHANNEL

    @classmethod
    def rebuild(
        cls, pool_size: int, domains: Iterable[LiveDomain], claims: Mapping[str, ClaimHold]
    ) -> ChannelBook:
        """A book from what the API shows: every live domain and every claim holding a number."""
        book = cls(pool_size)
        for domain in domains:
            book.record(domain)
        for claim, hold in claims.items():
            book.hold(claim, hold)
        return book

    # -- facts from the API ------------------------------------------------------------------------

    def record(self, domain: LiveDomain) -> None:
        """A live domain as its object shows it; its recorded number replaces what the book had."""
        previous = self._domains.get(domain.uid)
        if previous is not None and previous.channel is not None and domain.channel is None:
            # A status without the number is older than the book's reservation (a cache lagging our own
            # write): keep the number, or it would be handed out twice.
            domain = replace(domain, channel=previous.channel)
        self._domains[domain.uid] = domain
        if previous is not None and previous.channel == domain.channel:
            return
        self._drop_owner(previous)
        if domain.channel is not None:
            self._owners.setdefault(domain.channel, set()).add(domain.uid)

    def forget(self, uid: str) -> None:
        """The domain is gone from the API, or its reservation failed to be written."""
        self._drop_owner(self._domains.pop(uid, None))

    def hold(self, claim: str, hold: ClaimHold) -> None:
        """A claim's allocation holds these numbers (replaces what the book had for the claim)."""
        self.release(claim)
        self._claims[claim] = hold
        for channel in hold.channels:
            self._holders.setdefault(channel, set()).add(claim)

    def release(self, claim: str) -> None:
        """The claim is gone from the API: its numbers are no longer held by it."""
        hold = self._claims.pop(claim, None)
        if hold is None:
            return
        for channel in hold.channels:
            holders = self._holders[channel]
            holders.discard(claim)
            if not holders:
                del self._holders[channel]
                self._freed(channel)

    # -- answers -----------------------------------------------------------------------------------

    def channel_of(self, uid: str) -> int | None:
        """The number the book has for a domain (recorded or just reserved), if any."""
        domain = self._domains.get(uid)
        return None if domain is None else domain.channel

    def is_free(self, channel: int) -> bool:
        """Whether ``channel`` can be handed out now: in the pool, recorded by no domain, held by no claim."""
        return (
            FIRST_CHANNEL <= channel < self.pool_size
            and channel not in self._owners
            and channel not in self._holders
        )

    def allocate(self, uid: str) -> int | None:
        """The domain's number: the one it has, else the lowest free one, reserved for it at once.

        ``None`` when every number is taken; ``KeyError`` for a domain the book was not told about.
        """
        domain = self._domains[uid]
        if domain.channel is not None:
            return domain.channel
        channel = self._lowest_maybe_free
        while channel < self.pool_size and not self.is_free(channel):
            channel += 1
        self._lowest_maybe_free = channel
        if channel == self.pool_size:
            return None
        self.record(replace(domain, channel=channel))
        return channel

    def recorded(self) -> dict[str, int]:
        """Every domain that has a number, with its number (for events that say who holds the pool)."""
        return {uid: domain.channel for uid, domain in self._domains.items() if domain.channel is not None}

    def taken(self) -> int:
        """How many numbers of the pool cannot be handed out: recorded by a live domain or held by a claim."""
        taken = self._owners.keys() | self._holders.keys()
        return sum(1 for n in taken if FIRST_CHANNEL <= n < self.pool_size)

    def holders(self, channel: int) -> frozenset[str]:
        """The claims still holding ``channel``."""
        return frozenset(self._holders.get(channel, ()))

    def invalid(self) -> dict[str, int]:
        """Domains recording a number outside ``1 .. pool_size - 1`` (channel 0, or a shrunk pool)."""
        return {
            uid: channel
            for uid, channel in self.recorded().items()
            if not FIRST_CHANNEL <= channel < self.pool_size
        }

    def conflicts(self) -> list[Conflict]:
        """Numbers recorded by more than one live domain, lowest number first."""
        found = (self.conflict_of(number) for number in sorted(self._owners))
        return [conflict for conflict in found if conflict is not None]

    def conflict_of(self, channel: int) -> Conflict | None:
        """The conflict over ``channel`` if several live domains record it (one reconcile's question)."""
        owners = self._owners.get(channel, set())
        if len(owners) < 2:
            return None
        keeper, *younger = sorted(owners, key=lambda uid: (self._domains[uid].created, uid))
        in_use = {
            hold.domain
            for claim in self._holders.get(channel, ())
            if (hold := self._claims[claim]).domain in owners
            and self._domains[hold.domain].namespace == hold.namespace
        }
        return Conflict(
            channel=channel,
            keeper=keeper,
            reassignable=tuple(uid for uid in younger if uid not in in_use),
            stuck=tuple(uid for uid in younger if uid in in_use),
        )

    # -- internals ---------------------------------------------------------------------------------

    def _drop_owner(self, domain: LiveDomain | None) -> None:
        if domain is None or domain.channel is None:
            return
        owners = self._owners[domain.channel]
        owners.discard(domain.uid)
        if not owners:
            del self._owners[domain.channel]
            self._freed(domain.channel)

    def _freed(self, channel: int) -> None:
        if channel < self._lowest_maybe_free and self.is_free(channel):
            self._lowest_maybe_free = channel
