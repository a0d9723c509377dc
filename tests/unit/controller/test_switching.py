"""Isolation switched back to ``domain`` while channel-made domains live (docs/channel-isolation.md §7).

Aspects covered: a domain recording a channel counts as channel kind until it is deleted from the API
(Terminating included); new domains are held with ``IsolationSwitchPending`` meanwhile and requeued
once the last one is gone; a domain is never held back by itself; no channel-kind domain, no hold; a
live workload template on the channel class counts too (a restore may drop the status), a default-class,
daemon or Terminating template does not.
"""

from __future__ import annotations

import datetime as dt

import pytest

from imexdra.api.computedomain import ComputeDomain, ComputeDomainStatus
from imexdra.api.constants import ComputeDomainStatusValue
from imexdra.common.kube.models.resource_v1 import ResourceClaimTemplate
from imexdra.controller import reasons, render
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


def template(owner: str, channel: int | None, *, deleting: bool = False) -> ResourceClaimTemplate:
    """The workload template the controller renders for ``owner`` (channel class if ``channel``)."""
    rct = render.workload_claim_template(domain(owner), channel)
    assert rct.metadata is not None
    rct.metadata.uid = f"rct-{owner}"
    if deleting:
        rct.metadata.deletionTimestamp = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    return rct


def test_a_channel_class_template_makes_its_domain_channel_kind() -> None:
    """A domain whose status lost its number still holds new ones back while its channel template lives."""
    restored, new = domain("restored"), domain("new")
    tracker, requeued = kinds(restored, new)
    tracker.template_seen(template("restored", 4))
    held = tracker.hold(new)
    assert held is not None and held.reason == reasons.ISOLATION_SWITCH_PENDING
    tracker.template_gone(template("restored", 4))
    assert requeued == ["new"]
    assert tracker.hold(new) is None


@pytest.mark.parametrize(
    "rct",
    [
        template("plain", None),
        template("going", 4, deleting=True),
        render.daemon_claim_template("daemon", "nvidia-dra"),
    ],
    ids=["default-class", "terminating", "daemon-template"],
)
def test_other_templates_do_not_count(rct: ResourceClaimTemplate) -> None:
    """Templates on the default class, Terminating ones and daemon templates hold nobody back."""
    assert rct.metadata is not None
    rct.metadata.uid = rct.metadata.uid or "rct-daemon"
    tracker, _ = kinds(domain("new"))
    tracker.template_seen(rct)
    assert tracker.hold(domain("new")) is None


def test_a_template_update_off_the_channel_class_releases() -> None:
    """A channel template seen again as Terminating stops counting and wakes the held domains."""
    tracker, requeued = kinds(domain("a"), domain("new"))
    tracker.template_seen(template("a", 2))
    assert tracker.hold(domain("new")) is not None
    tracker.template_seen(template("a", 2, deleting=True))
    assert requeued == ["new"]
