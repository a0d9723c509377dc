"""The IMEX channel book of channel isolation (docs/channel-isolation.md §4).

Aspects covered: lowest free number from 1 (never 0); idempotence; numbers recorded by live domains
or held by claims never handed out; reuse only once the domain and every claim holding its number are
gone; exhaustion and recovery; duplicates and out-of-pool records reported, never fixed silently; a
lagging status never undoes a reservation; a book rebuilt from the API answers as the old one did. A
stateful property test runs random sequences of all of these against a brute-force model.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from imexdra.common.errors import ConfigError
from imexdra.controller.channels import ChannelBook, ClaimHold, Conflict, LiveDomain

T0 = datetime(2026, 11, 1, tzinfo=UTC)
#: Every domain's namespace here, and claims' unless a test says otherwise.
NAMESPACE = "team-a"


def domain(uid: str, channel: int | None = None, *, age: int = 0) -> LiveDomain:
    """A live domain created ``age`` seconds after T0."""
    return LiveDomain(uid=uid, created=T0 + timedelta(seconds=age), channel=channel, namespace=NAMESPACE)


def book_with(pool_size: int = 8, *domains: LiveDomain, **claims: ClaimHold) -> ChannelBook:
    return ChannelBook.rebuild(pool_size, domains, claims)


def hold(*channels: int, domain: str | None = None, namespace: str = "team-a") -> ClaimHold:
    return ClaimHold(domain=domain, channels=frozenset(channels), namespace=namespace)


def test_numbers_start_at_one_and_go_up() -> None:
    """Channel 0 is never handed out; new domains get 1, 2, 3 in turn."""
    book = book_with(8, domain("a"), domain("b"), domain("c"))
    assert [book.allocate(uid) for uid in ("a", "b", "c")] == [1, 2, 3]


def test_allocate_is_idempotent() -> None:
    """Asking again for a domain gives its number, and takes no other."""
    book = book_with(8, domain("a"), domain("b"))
    assert book.allocate("a") == book.allocate("a") == 1
    assert book.allocate("b") == 2


@pytest.mark.parametrize(
    ("domains", "claims", "expected"),
    [
        pytest.param([domain("x", 1), domain("y", 3)], {}, 2, id="gap-between-recorded"),
        pytest.param([domain("x", 1), domain("y", 2)], {}, 3, id="above-recorded"),
        pytest.param([], {"c1": hold(1)}, 2, id="held-by-a-claim-of-a-gone-domain"),
        pytest.param([], {"c1": hold(1, 2, 3)}, 4, id="claim-holding-several"),
        pytest.param([domain("x", 0)], {}, 1, id="channel-0-record-takes-nothing"),
        pytest.param([domain("x", 99)], {}, 1, id="out-of-pool-record-takes-nothing"),
    ],
)
def test_new_domain_gets_the_lowest_free_number(
    domains: list[LiveDomain], claims: dict[str, ClaimHold], expected: int
) -> None:
    """Numbers recorded by live domains or held by claims are skipped; the lowest other one is taken."""
    book = book_with(8, *domains, domain("new"), **claims)
    assert book.allocate("new") == expected


def test_number_is_reused_only_after_its_domain_and_claims_are_gone() -> None:
    """A deleted domain's number stays taken while a claim holds it, and is the first one reused after."""
    book = book_with(8, domain("a", 1), domain("b"), domain("c"), c1=hold(1, domain="a"))
    book.forget("a")
    assert not book.is_free(1)
    assert book.allocate("b") == 2
    book.release("c1")
    assert book.is_free(1)
    assert book.allocate("c") == 1


def test_claim_gone_before_domain_keeps_the_number_recorded() -> None:
    """Releasing a claim does not free a number its live domain still records."""
    book = book_with(8, domain("a", 1), domain("b"), c1=hold(1, domain="a"))
    book.release("c1")
    assert book.allocate("b") == 2


def test_exhaustion_and_recovery() -> None:
    """A pool of 3 has numbers 1 and 2; a third domain gets None until one of them is freed."""
    book = book_with(3, domain("a"), domain("b"), domain("c"))
    assert [book.allocate("a"), book.allocate("b"), book.allocate("c")] == [1, 2, None]
    assert book.channel_of("c") is None
    book.forget("b")
    assert book.allocate("c") == 2


def test_pool_without_numbers_to_hand_out_is_a_config_error() -> None:
    """A pool of 1 (channel 0 only) leaves nothing for channel isolation."""
    with pytest.raises(ConfigError, match="leaves no channel besides channel 0"):
        ChannelBook(1)


def test_unknown_domain_cannot_be_allocated() -> None:
    """The reconciler must record a domain before asking for its number."""
    with pytest.raises(KeyError):
        ChannelBook(8).allocate("nobody")


def test_lagging_status_does_not_undo_a_reservation() -> None:
    """A domain seen again without a number (cache older than our write) keeps the number reserved."""
    book = book_with(8, domain("a"), domain("b"))
    assert book.allocate("a") == 1
    book.record(domain("a"))
    assert book.channel_of("a") == 1
    assert book.allocate("b") == 2


def test_failed_reservation_is_forgotten_and_retried() -> None:
    """A reservation whose status write failed is forgotten; the domain gets the lowest free number again."""
    book = book_with(8, domain("a"))
    assert book.allocate("a") == 1
    book.forget("a")
    book.record(domain("a"))
    assert book.channel_of("a") is None
    assert book.allocate("a") == 1


def test_status_number_replaces_the_books() -> None:
    """What the API records wins over the book (a former leader's write): the old number is freed."""
    book = book_with(8, domain("a"), domain("b"))
    assert book.allocate("a") == 1
    book.record(domain("a", 5))
    assert book.recorded() == {"a": 5}
    assert book.allocate("b") == 1


def test_claim_hold_is_replaced_not_added() -> None:
    """A claim's numbers are what its latest allocation shows."""
    book = book_with(8, domain("a"), c1=hold(1, 2))
    book.hold("c1", hold(2))
    assert book.holders(1) == frozenset()
    assert book.holders(2) == {"c1"}
    assert book.allocate("a") == 1


@pytest.mark.parametrize(
    ("claims", "expected"),
    [
        pytest.param(
            {}, Conflict(channel=4, keeper="z-old", reassignable=("a-young",), stuck=()), id="unused"
        ),
        pytest.param(
            {"c": hold(4, domain="a-young")},
            Conflict(channel=4, keeper="z-old", reassignable=(), stuck=("a-young",)),
            id="younger-in-use",
        ),
        pytest.param(
            {"c": hold(4, domain="z-old"), "d": hold(4)},
            Conflict(channel=4, keeper="z-old", reassignable=("a-young",), stuck=()),
            id="only-keeper-and-unknown-in-use",
        ),
        pytest.param(
            {"c": hold(4, domain="a-young", namespace="tenant")},
            Conflict(channel=4, keeper="z-old", reassignable=("a-young",), stuck=()),
            id="claim-of-another-namespace-does-not-use-it",
        ),
    ],
)
def test_duplicates_are_reported_with_the_oldest_domain_keeping_the_number(
    claims: dict[str, ClaimHold], expected: Conflict
) -> None:
    """Two live domains recording one number: the older keeps it; the younger moves only if unused.

    Only a claim of the domain's own namespace uses its number (docs/tenancy.md).
    """
    book = book_with(8, domain("a-young", 4, age=10), domain("z-old", 4, age=1), domain("other", 2), **claims)
    assert book.conflicts() == [expected]


def test_duplicate_creation_time_is_ordered_by_uid() -> None:
    """Domains created in the same second are ordered by UID, so every leader picks the same keeper."""
    book = book_with(8, domain("b", 3), domain("a", 3), domain("c", 3))
    assert book.conflicts() == [Conflict(channel=3, keeper="a", reassignable=("b", "c"), stuck=())]


def test_invalid_records_are_reported() -> None:
    """Channel 0 and numbers beyond a shrunk pool are reported, and stay the domain's own."""
    book = book_with(4, domain("zero", 0), domain("big", 4), domain("ok", 3))
    assert book.invalid() == {"zero": 0, "big": 4}
    assert book.allocate("big") == 4


def test_burst_over_the_whole_pool_is_linear() -> None:
    """2047 domains take 1..2047 in order; the pool is then exhausted (the scan never restarts at 1)."""
    book = ChannelBook(2048)
    for n in range(2048):
        book.record(domain(f"d{n}"))
    assert [book.allocate(f"d{n}") for n in range(2048)] == [*range(1, 2048), None]


class BookMachine(RuleBasedStateMachine):
    """Random operations on a book, checked against a brute-force model and against a rebuilt book."""

    def __init__(self) -> None:
        super().__init__()
        self.pool_size = 2
        self.book = ChannelBook(self.pool_size)
        self.domains: dict[str, LiveDomain] = {}
        self.claims: dict[str, ClaimHold] = {}
        self.serial = 0

    @initialize(pool_size=st.integers(min_value=2, max_value=7))
    def pool(self, pool_size: int) -> None:
        self.pool_size = pool_size
        self.book = ChannelBook(pool_size)

    def _taken(self) -> set[int]:
        recorded = {d.channel for d in self.domains.values() if d.channel is not None}
        held = {n for c in self.claims.values() for n in c.channels}
        return recorded | held

    @rule(channel=st.none() | st.integers(min_value=0, max_value=8), age=st.integers(0, 5))
    def create(self, channel: int | None, age: int) -> None:
        """A domain appears, with or without a number (a duplicate or invalid one included)."""
        self.serial += 1
        new = domain(f"d{self.serial}", channel, age=age)
        self.domains[new.uid] = new
        self.book.record(new)

    @precondition(lambda self: self.domains)
    @rule(data=st.data())
    def allocate(self, data: st.DataObject) -> None:
        """The answer is the domain's number, else the lowest free one, else None."""
        uid = data.draw(st.sampled_from(sorted(self.domains)))
        current = self.domains[uid].channel
        free = [n for n in range(1, self.pool_size) if n not in self._taken()]
        expected = current if current is not None else (free[0] if free else None)
        assert self.book.allocate(uid) == expected
        if current is None and expected is not None:
            assert expected not in self._taken()
            self.domains[uid] = replace(self.domains[uid], channel=expected)

    @precondition(lambda self: self.domains)
    @rule(data=st.data())
    def lagging_status(self, data: st.DataObject) -> None:
        """The domain is seen again through a cache that has not got its number yet."""
        uid = data.draw(st.sampled_from(sorted(self.domains)))
        self.book.record(replace(self.domains[uid], channel=None))

    @precondition(lambda self: self.domains)
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        """A domain is gone from the API."""
        uid = data.draw(st.sampled_from(sorted(self.domains)))
        del self.domains[uid]
        self.book.forget(uid)

    @rule(
        name=st.sampled_from(["c1", "c2", "c3"]),
        channels=st.frozensets(st.integers(min_value=1, max_value=7), max_size=2),
        owner=st.none() | st.sampled_from(["d1", "d2", "d3"]),
    )
    def claim(self, name: str, channels: frozenset[int], owner: str | None) -> None:
        """A claim's allocation holds numbers (replacing its earlier ones)."""
        self.claims[name] = ClaimHold(owner, channels, NAMESPACE)
        self.book.hold(name, self.claims[name])

    @rule(name=st.sampled_from(["c1", "c2", "c3"]))
    def release(self, name: str) -> None:
        """A claim is gone from the API."""
        self.claims.pop(name, None)
        self.book.release(name)

    @rule()
    def restart(self) -> None:
        """A new leader rebuilds the book from what the API shows."""
        self.book = ChannelBook.rebuild(self.pool_size, self.domains.values(), self.claims)

    @invariant()
    def book_matches_model(self) -> None:
        """Records, free numbers and duplicates are what the model says."""
        recorded = {uid: d.channel for uid, d in self.domains.items() if d.channel is not None}
        assert self.book.recorded() == recorded
        taken = self._taken()
        assert [n for n in range(-1, 10) if self.book.is_free(n)] == [
            n for n in range(1, self.pool_size) if n not in taken
        ]
        duplicated = {n for n in recorded.values() if list(recorded.values()).count(n) > 1}
        assert {c.channel for c in self.book.conflicts()} == duplicated


BookMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
test_book_against_model = BookMachine.TestCase


def test_taken_counts_each_number_of_the_pool_once() -> None:
    """Recorded and held numbers count once each; a number outside the pool does not count."""
    book = ChannelBook(4)
    book.record(domain("a", 1))
    book.record(domain("b", 2))
    book.hold("c1", hold(2, 3, domain="b"))
    book.record(domain("old", 9))
    assert book.taken() == 3
    book.release("c1")
    book.forget("a")
    assert book.taken() == 1
