"""The per-namespace bound on ComputeDomains (``controller.quota``, docs/tenancy.md "Quotas").

Aspects covered: ``admit``'s table (no bound, under and at the bound, oldest waiting first, ties by
UID, admitted domains keep their place when the bound is lowered, Terminating ones count); the
refusal's condition and event texts (bound, count, place, what would work, only the namespace's own
names); namespaces are independent; a verdict does not depend on the order domains are reconciled
in; an admission holds before its template exists; a domain gone requeues its namespace's waiting
domains oldest first; what counts as holding a place in the caches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from imexdra.api.computedomain import ComputeDomain, ComputeDomainStatus
from imexdra.api.constants import ClaimTemplateTarget, ComputeDomainStatusValue
from imexdra.controller import reasons
from imexdra.controller.placement import Home
from imexdra.controller.quota import NAMED_DOMAINS, Member, NamespaceQuota, admit, holds_place
from tests.unit.controller.support import make_domain

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def member(uid: str, age: int = 0, *, admitted: bool = False, terminating: bool = False) -> Member:
    return Member(uid, uid, T0 + timedelta(seconds=age), admitted, terminating)


@pytest.mark.parametrize(
    ("uid", "members", "bound", "admitted", "place"),
    [
        pytest.param("c", [member("a", 0, admitted=True), member("c", 2)], 0, True, 0, id="no-bound"),
        pytest.param("c", [member("a", 0, admitted=True), member("c", 2)], 2, True, 0, id="under-the-bound"),
        pytest.param(
            "c",
            [member("a", 0, admitted=True), member("b", 1, admitted=True), member("c", 2)],
            2,
            False,
            1,
            id="at-the-bound",
        ),
        pytest.param(
            "c",
            [member("a", 0, admitted=True), member("c", 2), member("b", 1)],
            2,
            False,
            2,
            id="older-waiting-domain-first",
        ),
        pytest.param(
            "b",
            [member("a", 0, admitted=True), member("c", 2), member("b", 1)],
            2,
            True,
            0,
            id="oldest-waiting-domain-admitted",
        ),
        pytest.param("y", [member("y", 5), member("x", 5)], 1, False, 2, id="same-second-tie-by-uid"),
        pytest.param("x", [member("y", 5), member("x", 5)], 1, True, 0, id="tie-winner"),
        pytest.param(
            "c",
            [member(u, i, admitted=True) for i, u in enumerate("abc")],
            1,
            True,
            0,
            id="bound-lowered-keeps-the-admitted",
        ),
        pytest.param(
            "c",
            [member("a", 0, admitted=True, terminating=True), member("c", 2)],
            1,
            False,
            1,
            id="terminating-still-counts",
        ),
    ],
)
def test_admit(uid: str, members: list[Member], bound: int, admitted: bool, place: int) -> None:
    """Admitted domains keep their place; waiting ones get free places oldest first (time, then UID)."""
    answer = admit(uid, members, bound)
    assert (answer.admitted, answer.place, answer.domains) == (admitted, place, len(members))


def domain(
    name: str, *, age: int = 0, namespace: str = "team-a", deleting: bool = False, channel: int | None = None
) -> ComputeDomain:
    """A domain named and UID'd ``name`` in ``namespace``, created ``age`` seconds after T0."""
    cd = make_domain(name=name, namespace=namespace, uid=name)
    assert cd.metadata is not None
    cd.metadata.creationTimestamp = T0 + timedelta(seconds=age)
    if deleting:
        cd.metadata.deletionTimestamp = T0 + timedelta(hours=1)
    if channel is not None:
        cd.status = ComputeDomainStatus(status=ComputeDomainStatusValue.READY, channel=channel)
    return cd


@dataclass
class Setup:
    """A quota over some domains; ``placed`` are the UIDs that have a template or channel."""

    quota: NamespaceQuota
    placed: set[str] = field(default_factory=set)
    requeued: list[str] = field(default_factory=list)


def quota_over(
    bound: int, *domains: ComputeDomain, placed: set[str] | None = None, channels: bool = False
) -> Setup:
    placed = set(placed or ())
    requeued: list[str] = []
    quota = NamespaceQuota(
        bound,
        holds_place=lambda cd: cd.metadata is not None and cd.metadata.uid in placed,
        requeue=requeued.append,
        channels=channels,
    )
    for cd in domains:
        quota.domain_seen(cd)
    return Setup(quota, placed, requeued)


def test_refusal_says_the_bound_the_count_and_what_works() -> None:
    """Condition: bound, count, place and the two ways out; event: also the admitted, by name."""
    a, b, c, d = (domain(n, age=i) for i, n in enumerate("abcd"))
    setup = quota_over(2, a, b, c, d, placed={"a", "b"})
    verdict = setup.quota.decide(d)
    assert verdict is not None
    assert (verdict.channel, verdict.allocated, verdict.reason) == (
        None,
        False,
        reasons.NAMESPACE_QUOTA_EXCEEDED,
    )
    assert verdict.message == (
        "namespace team-a may have 2 ComputeDomain(s) admitted at once and has 4: this one waits "
        "(number 2 in line) with no claim template until one of the namespace's ComputeDomains is "
        "deleted or the cluster operator raises the bound (resources.computeDomains.maxPerNamespace)"
    )
    assert verdict.note == f"{verdict.message}; admitted: a, b"


def test_refusal_under_channel_isolation_says_no_channel_is_taken() -> None:
    """Under channel isolation the refusal says the domain has no IMEX channel either."""
    a, b = domain("a"), domain("b", age=1)
    setup = quota_over(1, a, b, placed={"a"}, channels=True)
    verdict = setup.quota.decide(b)
    assert verdict is not None
    assert "with no claim template or IMEX channel until" in verdict.message


def test_event_names_only_the_namespace_s_own_domains_and_marks_deleting_ones() -> None:
    """Other namespaces' domains are neither counted nor named; a deleting one is marked; ten at most."""
    names = [f"a{i:02}" for i in range(NAMED_DOMAINS + 2)]
    ours = [domain(name, age=i, deleting=i == 0) for i, name in enumerate(names)]
    theirs = domain("secret-project", namespace="team-b")
    late = domain("late", age=100)
    setup = quota_over(NAMED_DOMAINS + 2, *ours, theirs, late, placed=set(names))
    verdict = setup.quota.decide(late)
    assert verdict is not None
    assert "has 13:" in verdict.message
    assert "secret-project" not in verdict.note
    assert verdict.note.endswith(
        "; admitted: a00 (being deleted), a01, a02, a03, a04, a05, a06, a07, a08, a09 and 2 more"
    )


def test_namespaces_are_independent() -> None:
    """A namespace at its bound does not hold back another namespace's domain."""
    a1, a2 = domain("a1"), domain("a2", age=1)
    b1 = domain("b1", age=2, namespace="team-b")
    setup = quota_over(1, a1, a2, b1, placed={"a1"})
    assert setup.quota.decide(a2) is not None
    assert setup.quota.decide(b1) is None


def test_verdicts_do_not_depend_on_reconcile_order() -> None:
    """Bound 1, no template yet: the older domain is admitted whether it or the younger is asked first."""
    old, young = domain("old"), domain("young", age=1)
    setup = quota_over(1, old, young)
    assert setup.quota.decide(young) is not None
    assert setup.quota.decide(old) is None
    assert setup.quota.decide(young) is not None


def test_an_admission_holds_before_its_template_exists() -> None:
    """Once admitted a domain keeps its place, though nothing of it exists yet: no second admission."""
    first, second = domain("first", age=5), domain("second", age=9)
    setup = quota_over(1, second)
    assert setup.quota.decide(second) is None  # the older one is not in the cache yet
    setup.quota.domain_seen(first)
    assert setup.quota.decide(first) is not None
    assert setup.quota.decide(second) is None


def test_a_terminating_domain_counts_until_it_is_gone() -> None:
    """A deleting domain keeps its place; once gone, the waiting ones are requeued oldest first."""
    a = domain("a", deleting=True)
    c, b = domain("c", age=2), domain("b", age=1)
    other = domain("x", namespace="team-b", age=3)
    setup = quota_over(1, a, c, b, other, placed={"x"})
    assert setup.quota.decide(c) is not None
    assert setup.quota.decide(b) is not None
    assert setup.quota.decide(other) is None
    setup.quota.domain_gone(a)
    assert setup.requeued == ["team-a/b", "team-a/c"]
    assert setup.quota.decide(b) is None
    assert setup.quota.decide(c) is not None


def test_an_admitted_domain_gone_frees_its_place() -> None:
    """The in-memory admission ends with the domain: the next in line gets the place."""
    a, b = domain("a"), domain("b", age=1)
    setup = quota_over(1, a, b)
    assert setup.quota.decide(a) is None
    assert setup.quota.decide(b) is not None
    setup.quota.domain_gone(a)
    assert setup.requeued == ["team-a/b"]
    assert setup.quota.decide(b) is None


def test_no_requeue_when_nobody_waits() -> None:
    """A domain gone from a namespace where nobody waits requeues nothing."""
    a, b = domain("a"), domain("b", age=1)
    setup = quota_over(2, a, b)
    assert setup.quota.decide(a) is None
    setup.quota.domain_gone(b)
    assert setup.requeued == []


@dataclass
class Caches:
    """What ``holds_place`` reads: the templates in each domain's place."""

    placed: dict[tuple[str, ClaimTemplateTarget], list[str]]

    def templates_of(self, home: Home, target: ClaimTemplateTarget) -> list[str]:
        return self.placed.get((home.uid, target), [])


@pytest.mark.parametrize(
    ("placed", "channel", "expected"),
    [
        pytest.param({("a", ClaimTemplateTarget.WORKLOAD): ["t"]}, None, True, id="workload-template"),
        pytest.param({("a", ClaimTemplateTarget.DAEMON): ["t"]}, None, True, id="daemon-template"),
        pytest.param({}, 7, True, id="recorded-channel"),
        pytest.param({}, None, False, id="nothing"),
    ],
)
def test_holds_place(
    placed: dict[tuple[str, ClaimTemplateTarget], list[str]], channel: int | None, expected: bool
) -> None:
    """A domain with a claim template in its place, or a recorded channel, holds a place.

    The caches answer with templates in the domain's place only (``placement``), so a look-alike
    labelled with a waiting domain's UID does not admit it.
    """
    cd = domain("a", channel=channel)
    assert holds_place(Caches(placed), cd) is expected  # type: ignore[arg-type]
