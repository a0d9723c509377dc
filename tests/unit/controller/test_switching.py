"""Isolation switched back to ``domain`` while channel-made domains live (docs/channel-isolation.md §7).

Aspects covered: a domain recording a channel counts as channel kind until it is deleted from the API
(Terminating included); new domains are held with ``IsolationSwitchPending`` meanwhile and requeued
once the last one is gone; a domain is never held back by itself; no channel-kind domain, no hold.
"""

from __future__ import annotations

from imexdra.api.computedomain import ComputeDomain, ComputeDomainStatus
from imexdra.api.constants import ComputeDomainStatusValue
from imexdra.controller import reasons
from imexdra.controller.switching import ChannelKindDomains
from tests.unit.controller.support import make_domain


def domain(name: str, channel: int | None = None) -> ComputeDomain:
    """A domain named and UID'd ``name``, recording ``channel`` if given."""
    cd = make_domain(name=name, uid=name)
    if channel is not None:
        cd.status = ComputeDomainStatus(status=ComputeDomainStatusValue.READY, channel=channel)
    return cd


def kinds(*domains: ComputeDomain) -> tuple[ChannelKindDomains, list[str]]:
    requeued: list[str] = []
    tracker = ChannelKindDomains(requeue=requeued.append)
    for cd in domains:
        tracker.domain_seen(cd)
    return tracker, requeued


def test_without_channel_kind_domains_nothing_is_held() -> None:
    """Domain isolation with only domain-kind domains: no verdict, upstream's behaviour."""
    tracker, requeued = kinds(domain("a"), domain("b"))
    assert tracker.hold(domain("b")) is None
    assert requeued == []


def test_new_domains_wait_for_every_channel_kind_domain_to_go() -> None:
    """Two channel-kind domains: new ones are held until both are deleted, then requeued once."""
    one, two, new, newer = domain("one", 1), domain("two", 2), domain("new"), domain("newer")
    tracker, requeued = kinds(one, two, new, newer)
    held = tracker.hold(new)
    assert held is not None
    assert (held.channel, held.allocated, held.reason) == (None, False, reasons.ISOLATION_SWITCH_PENDING)
    assert '2 ComputeDomain(s) made under isolation "channel" still live' in held.message
    assert tracker.hold(newer) is not None
    tracker.domain_gone(one)
    assert requeued == []
    assert tracker.hold(new) is not None
    tracker.domain_gone(two)
    assert requeued == ["new", "newer"]
    assert tracker.hold(new) is None
    tracker.domain_gone(domain("three", 3))
    assert requeued == ["new", "newer"], "woken once"


def test_a_channel_kind_domain_is_not_held_by_itself() -> None:
    """The only channel-kind domain asking is not held (the reconciler refuses it as a mismatch instead)."""
    only = domain("only", 5)
    tracker, _ = kinds(only)
    assert tracker.hold(only) is None


def test_a_held_domain_that_is_deleted_is_not_requeued() -> None:
    """A held domain deleted before the switch completes is forgotten."""
    old, new = domain("old", 1), domain("new")
    tracker, requeued = kinds(old, new)
    assert tracker.hold(new) is not None
    tracker.domain_gone(new)
    tracker.domain_gone(old)
    assert requeued == []
