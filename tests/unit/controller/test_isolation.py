"""Channel isolation's verdicts on live domains (docs/channel-isolation.md §4, §7).

Aspects covered: a new domain gets the lowest free number and keeps it; ``All`` is refused; an
exhausted pool names the holders and requeues waiting domains oldest first when a number frees up; a
younger duplicate no claim uses gets a new number, one in use is a conflict for both; an out-of-pool
number is reported, not moved; domains made under ``domain`` isolation are refused and hold new ones
back; a failed status write releases the reservation; conditions keep their transition time; the
pool's gauges follow the book.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from prometheus_client import REGISTRY

from imexdra.api.computedomain import ComputeDomain, ComputeDomainStatus
from imexdra.api.constants import AllocationMode, ComputeDomainStatusValue, ConditionStatus
from imexdra.common.kube.models.meta_v1 import ObjectMeta
from imexdra.controller import reasons
from imexdra.controller.channels import ClaimHold
from imexdra.controller.claimholds import ChannelClaim
from imexdra.controller.isolation import ChannelAssigner, Verdict
from imexdra.controller.sync import channel_conditions
from tests.unit.controller.support import make_domain

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def domain(
    name: str,
    *,
    age: int = 0,
    channel: int | None = None,
    mode: AllocationMode = AllocationMode.SINGLE,
    namespace: str = "team-a",
) -> ComputeDomain:
    """A domain named and UID'd ``name``, created ``age`` seconds after T0."""
    cd = make_domain(name=name, uid=name, mode=mode, namespace=namespace)
    assert cd.metadata is not None
    cd.metadata.creationTimestamp = T0 + timedelta(seconds=age)
    if channel is not None:
        cd.status = ComputeDomainStatus(status=ComputeDomainStatusValue.READY, channel=channel)
    return cd


def claim(uid: str, *channels: int, domain: str | None = None) -> ChannelClaim:
    return ChannelClaim(
        metadata=ObjectMeta(name=uid, namespace="team-a", uid=uid),
        hold=ClaimHold(domain, frozenset(channels), "team-a") if channels else None,
    )


class Recorder:
    """The assigner's requeues, in order."""

    def __init__(self) -> None:
        self.keys: list[str] = []


def assigner(pool_size: int = 4, *domains: ComputeDomain) -> tuple[ChannelAssigner, Recorder]:
    requeued = Recorder()
    keys = {cd.metadata.uid: f"{cd.metadata.namespace}/{cd.metadata.name}" for cd in domains if cd.metadata}
    book = ChannelAssigner(pool_size, name_of=keys.get, requeue=requeued.keys.append)
    for cd in domains:
        book.domain_seen(cd)
    return book, requeued


def decide(book: ChannelAssigner, cd: ComputeDomain, *, old_kind: bool = False) -> Verdict:
    return book.decide(cd, domain_kind_template=old_kind)


def test_new_domains_get_the_lowest_free_numbers_and_keep_them() -> None:
    """1, then 2; asking again gives the same number."""
    a, b = domain("a"), domain("b")
    book, _ = assigner(4, a, b)
    assert decide(book, a) == Verdict(1, True, reasons.CHANNEL_ALLOCATED, "IMEX channel 1")
    assert decide(book, b).channel == 2
    assert decide(book, a).channel == 1


def test_allocation_mode_all_is_refused_without_a_number() -> None:
    """All gets AllocationModeUnsupported, no number, and takes none from the pool."""
    all_mode, single = domain("all", mode=AllocationMode.ALL), domain("single")
    book, _ = assigner(4, all_mode, single)
    verdict = decide(book, all_mode)
    assert (verdict.channel, verdict.allocated, verdict.reason) == (
        None,
        False,
        reasons.ALLOCATION_MODE_UNSUPPORTED,
    )
    assert "Single" in verdict.message
    assert decide(book, single).channel == 1


def test_exhaustion_names_holders_and_wakes_waiting_domains_oldest_first() -> None:
    """A full pool refuses with the holders named; a freed number requeues the oldest waiter first."""
    a, b, c = domain("a", age=0), domain("b", age=1), domain("c", age=2)
    young, old = domain("young", age=20), domain("old", age=10)
    book, requeued = assigner(4, a, b, c, young, old)
    assert [decide(book, cd).channel for cd in (a, b, c)] == [1, 2, 3]
    refused = decide(book, young)
    assert (refused.allocated, refused.reason) == (False, reasons.CHANNELS_EXHAUSTED)
    assert refused.message == "all 3 IMEX channels are taken; waiting for one to come free"
    assert "team-a/a (1), team-a/b (2), team-a/c (3)" in refused.note
    decide(book, old)
    book.claim_seen(claim("c1", 2, domain="b"))
    book.domain_gone(b)
    assert requeued.keys == ["team-a/old", "team-a/young"]
    assert decide(book, old).reason == reasons.CHANNELS_EXHAUSTED  # a claim still holds 2
    book.claim_gone(claim("c1"))
    assert decide(book, old).channel == 2


def test_notes_name_only_domains_of_the_asking_namespace() -> None:
    """Exhaustion and conflict notes count other namespaces' domains and name none (docs/tenancy.md)."""
    mine, theirs = domain("mine", age=0), domain("theirs", age=1, namespace="team-b")
    book, _ = assigner(3, mine, theirs, domain("late", age=2))
    assert [decide(book, cd).channel for cd in (mine, theirs)] == [1, 2]
    refused = decide(book, domain("late", age=2))
    assert "team-a/mine (1), 1 ComputeDomain(s) of other namespaces" in refused.note
    assert "team-b" not in refused.note and "theirs" not in refused.note

    older, younger = domain("older", channel=1, namespace="team-b"), domain("younger", age=5, channel=1)
    book, _ = assigner(4, older, younger)
    book.claim_seen(claim("c1", 1, domain="younger"))
    verdict = decide(book, younger)
    assert verdict.reason == reasons.CHANNEL_CONFLICT
    assert "recorded by 1 ComputeDomain(s) of other namespaces" in verdict.message
    assert "team-b" not in verdict.message and "older" not in verdict.message


def test_younger_unused_duplicate_gets_a_new_number() -> None:
    """Two domains recording 1: the older keeps it, the younger (no claim uses it) gets 2."""
    older, younger = domain("older", age=0, channel=1), domain("younger", age=5, channel=1)
    book, _ = assigner(4, older, younger)
    assert decide(book, older).channel == 1
    assert decide(book, younger) == Verdict(2, True, reasons.CHANNEL_ALLOCATED, "IMEX channel 2")


def test_duplicate_in_use_is_a_conflict_for_both() -> None:
    """A claim of the younger domain holds the number: both are refused, each naming the other."""
    older, younger = domain("older", age=0, channel=1), domain("younger", age=5, channel=1)
    book, _ = assigner(4, older, younger)
    book.claim_seen(claim("c1", 1, domain="younger"))
    for cd, other in ((older, "team-a/younger"), (younger, "team-a/older")):
        verdict = decide(book, cd)
        assert (verdict.channel, verdict.allocated, verdict.reason) == (1, False, reasons.CHANNEL_CONFLICT)
        assert other in verdict.message


def test_out_of_pool_number_is_reported_not_moved() -> None:
    """A recorded 9 in a pool of 4 keeps its 9 and is refused with ChannelOutOfPool."""
    shrunk = domain("shrunk", channel=9)
    book, _ = assigner(4, shrunk)
    verdict = decide(book, shrunk)
    assert (verdict.channel, verdict.allocated, verdict.reason) == (9, False, reasons.CHANNEL_OUT_OF_POOL)


def test_domain_kind_domains_are_refused_and_hold_new_ones_back() -> None:
    """A domain-isolation domain gets IsolationMismatch; new domains wait until it is gone."""
    legacy, new = domain("legacy"), domain("new")
    book, _ = assigner(4, legacy, new)
    assert decide(book, legacy, old_kind=True).reason == reasons.ISOLATION_MISMATCH
    assert decide(book, new).reason == reasons.ISOLATION_SWITCH_PENDING
    book.domain_gone(legacy)
    assert decide(book, new).channel == 1


def test_a_default_class_template_is_domain_kind_even_with_a_number() -> None:
    """A recorded number does not make a channel-0 template isolated: mismatch, and new domains wait."""
    odd, new = domain("odd", channel=1), domain("new", age=1)
    book, _ = assigner(4, odd, new)
    verdict = decide(book, odd, old_kind=True)
    assert (verdict.allocated, verdict.reason) == (False, reasons.ISOLATION_MISMATCH)
    assert decide(book, new).reason == reasons.ISOLATION_SWITCH_PENDING


def test_domains_held_by_the_switch_are_requeued_when_the_old_kind_is_gone() -> None:
    """IsolationSwitchPending domains are woken, oldest first, when the last domain-kind domain goes."""
    legacy, newer, new = domain("legacy"), domain("newer", age=2), domain("new", age=1)
    book, requeued = assigner(4, legacy, newer, new)
    assert decide(book, legacy, old_kind=True).reason == reasons.ISOLATION_MISMATCH
    assert decide(book, newer).reason == reasons.ISOLATION_SWITCH_PENDING
    assert decide(book, new).reason == reasons.ISOLATION_SWITCH_PENDING
    assert requeued.keys == []
    book.domain_gone(legacy)
    assert requeued.keys == ["team-a/new", "team-a/newer"]


def test_a_failed_status_write_releases_the_reservation() -> None:
    """After reservation_failed the number is free again for whoever asks first."""
    a, b = domain("a"), domain("b")
    book, _ = assigner(4, a, b)
    assert decide(book, a).channel == 1
    book.reservation_failed("a")
    assert decide(book, b).channel == 1


def test_condition_keeps_its_transition_time_while_its_status_holds() -> None:
    """Same status: the old transition time stays; a flip to True takes the new time (whole seconds)."""
    cd = domain("a")
    exhausted = Verdict(None, False, reasons.CHANNELS_EXHAUSTED, "full")
    (first,) = channel_conditions(cd, exhausted, T0)
    cd.status = ComputeDomainStatus(status=ComputeDomainStatusValue.NOT_READY, conditions=[first])
    (again,) = channel_conditions(cd, exhausted, T0 + timedelta(minutes=1))
    assert again == first
    later = T0 + timedelta(minutes=2, microseconds=5)
    (allocated,) = channel_conditions(
        cd, Verdict(3, True, reasons.CHANNEL_ALLOCATED, "IMEX channel 3"), later
    )
    assert (allocated.status, allocated.reason) == (ConditionStatus.TRUE, reasons.CHANNEL_ALLOCATED)
    assert allocated.last_transition_time == later.replace(microsecond=0)


def channel_gauges() -> tuple[float | None, float | None]:
    """``imexdra_imex_channel_pool_size`` and ``imexdra_imex_channels_in_use`` as a scrape reads them."""
    return (
        REGISTRY.get_sample_value("imexdra_imex_channel_pool_size"),
        REGISTRY.get_sample_value("imexdra_imex_channels_in_use"),
    )


def test_the_pool_gauges_count_numbers_taken_by_domains_or_claims() -> None:
    """Pool 1..4; a number counts while a live domain records it or a claim still holds it, once."""
    a, b = domain("a"), domain("b")
    book, _ = assigner(5, a, b)
    assert channel_gauges() == (4, 0)
    assert [decide(book, cd).channel for cd in (a, b)] == [1, 2]
    book.claim_seen(claim("c1", 2, 3, domain="b"))
    assert channel_gauges() == (4, 3)
    book.domain_gone(b)
    assert channel_gauges() == (4, 3), "b is gone, but the claim still holds 2 and 3"
    book.claim_gone(claim("c1", 2, 3, domain="b"))
    assert channel_gauges() == (4, 1)
