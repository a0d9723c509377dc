"""The per-namespace bound on ComputeDomains (``--max-compute-domains-per-namespace``).

docs/tenancy.md, "Quotas": one tenant must not take the cluster's IMEX channels (2047 under channel
isolation, docs/channel-isolation.md §1) or the controller's work from every other. With a bound N > 0
at most N domains of a namespace are *admitted* — given their claim template, under channel isolation
their channel, and in driver-managed mode their daemons; the rest wait NotReady with the reason
``NamespaceQuotaExceeded`` on the ``ChannelAllocated`` condition and a Warning event, through the
reconciler's refusal path that channel isolation uses (``isolation.Verdict``). Nothing is deleted and
no create is refused: Kubernetes' ResourceQuota does that, in the API server, before a domain exists.

Who is admitted, stable whatever order the domains are reconciled in (``admit``):

- a domain admitted once stays admitted until it is gone from the API: it has a claim template or a
  recorded channel, or this process admitted it (kept in memory, like the channel book's reservations,
  so two workers never admit past the bound between a verdict and the template it allows); a
  Terminating domain counts too, since its pods may still use its channel. Lowering the bound takes
  nothing away, as lowering a ResourceQuota deletes nothing;
- the waiting ones are admitted oldest first (creation time, then UID) while fewer than N hold a place.

When a domain of the namespace is gone from the API, the namespace's waiting domains are requeued,
oldest first. No I/O; fed by the ComputeDomain informer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from imexdra.api.computedomain import ComputeDomain
from imexdra.api.constants import ClaimTemplateTarget
from imexdra.common.machinery.events import and_more
from imexdra.controller import reasons
from imexdra.controller.caches import Caches
from imexdra.controller.isolation import Verdict
from imexdra.controller.placement import home_of
from imexdra.controller.switching import records_channel

#: How many of the namespace's counted domains a refusal's event names before it only counts the rest.
NAMED_DOMAINS = 10

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Member:
    """One ComputeDomain of a namespace, as the bound sees it."""

    uid: str
    name: str
    created: datetime
    #: Holds a place: admitted before (template, channel, or this process's word) or Terminating.
    admitted: bool
    terminating: bool = False


@dataclass(frozen=True, slots=True)
class Admission:
    """The bound's answer for one domain of a namespace."""

    admitted: bool
    #: The namespace's domains that hold a place, oldest first.
    counted: tuple[Member, ...]
    #: Every domain of the namespace, the waiting ones included.
    domains: int
    #: The domain's place among the waiting ones, 1 = next; 0 when admitted.
    place: int


def _order(member: Member) -> tuple[datetime, str]:
    return member.created, member.uid


def admit(uid: str, members: Sequence[Member], bound: int) -> Admission:
    """Whether the domain ``uid`` (one of ``members``, its namespace's domains) may have its objects.

    A domain holding a place keeps it, whatever the bound; a waiting one is admitted if fewer than
    ``bound`` domains would hold a place with it and every older waiting domain admitted first.
    """
    counted = tuple(sorted((m for m in members if m.admitted), key=_order))
    if bound <= 0 or any(m.uid == uid for m in counted):
        return Admission(True, counted, len(members), 0)
    waiting = [m.uid for m in sorted((m for m in members if not m.admitted), key=_order)]
    place = waiting.index(uid) + 1
    if place <= bound - len(counted):
        return Admission(True, counted, len(members), 0)
    return Admission(False, counted, len(members), place)


def _created(cd: ComputeDomain) -> datetime:
    stamp = cd.metadata.creationTimestamp if cd.metadata else None
    return stamp if stamp is not None else _EPOCH


def holds_place(caches: Caches, cd: ComputeDomain) -> bool:
    """Whether the domain already has what the bound guards: a claim template, or a recorded channel.

    Only a template in the domain's place counts (``placement``): a look-alike a tenant labels with a
    waiting domain's UID must not admit it.
    """
    home = home_of(cd)
    return records_channel(cd) or any(caches.templates_of(home, target) for target in ClaimTemplateTarget)


class NamespaceQuota:
    """The namespaces' domains, fed by the informer, and a refusal for each domain beyond the bound.

    Args:
        bound: most domains admitted per namespace (> 0).
        holds_place: whether a domain has its template or channel already (``holds_place``).
        requeue: queue a domain's ``namespace/name`` key for reconcile.
        channels: channel isolation is on (refusals say that no channel is taken either).

    """

    def __init__(
        self,
        bound: int,
        *,
        holds_place: Callable[[ComputeDomain], bool],
        requeue: Callable[[str], None],
        channels: bool = False,
    ) -> None:
        self.bound = bound
        self._holds_place = holds_place
        self._requeue = requeue
        self._withheld = "claim template or IMEX channel" if channels else "claim template"
        #: The latest object of every domain, by namespace and UID.
        self._domains: dict[str, dict[str, ComputeDomain]] = {}
        #: Domains this process admitted, until they are gone from the API.
        self._admitted: set[str] = set()
        #: Domains refused, by namespace: requeued when a domain of their namespace is gone.
        self._waiting: dict[str, set[str]] = {}

    # -- informer events ---------------------------------------------------------------------------

    def domain_seen(self, cd: ComputeDomain) -> None:
        """A domain added or updated."""
        meta = cd.metadata
        if meta is not None and meta.uid and meta.name and meta.namespace:
            self._domains.setdefault(meta.namespace, {})[meta.uid] = cd

    def domain_gone(self, cd: ComputeDomain) -> None:
        """A domain deleted from the API: its place is free; the namespace's waiting ones are requeued."""
        meta = cd.metadata
        if meta is None or not meta.uid or not meta.namespace:
            return
        namespace, uid = meta.namespace, meta.uid
        domains = self._domains.get(namespace, {})
        domains.pop(uid, None)
        if not domains:
            self._domains.pop(namespace, None)
        self._admitted.discard(uid)
        waiting = self._waiting.get(namespace, set())
        waiting.discard(uid)
        for other in sorted((domains[u] for u in waiting if u in domains), key=_created_then_uid):
            assert other.metadata is not None
            self._requeue(f"{namespace}/{other.metadata.name}")
        if not waiting:
            self._waiting.pop(namespace, None)

    # -- the reconciler's question -----------------------------------------------------------------

    def decide(self, cd: ComputeDomain) -> Verdict | None:
        """None if the live domain may have its objects (then it holds a place); else its refusal."""
        meta = cd.metadata
        if meta is None or not meta.uid or not meta.namespace:
            return None
        namespace, uid = meta.namespace, meta.uid
        self.domain_seen(cd)
        members = [self._member(other) for other in self._domains[namespace].values()]
        answer = admit(uid, members, self.bound)
        waiting = self._waiting.setdefault(namespace, set())
        if answer.admitted:
            self._admitted.add(uid)
            waiting.discard(uid)
            if not waiting:
                self._waiting.pop(namespace, None)
            return None
        waiting.add(uid)
        message = (
            f"namespace {namespace} may have {self.bound} ComputeDomain(s) admitted at once and has "
            f"{answer.domains}: this one waits (number {answer.place} in line) with no {self._withheld} "
            "until one of the namespace's ComputeDomains is deleted or the cluster operator raises the "
            "bound (resources.computeDomains.maxPerNamespace)"
        )
        return Verdict(
            None, False, reasons.NAMESPACE_QUOTA_EXCEEDED, message, f"{message}; admitted: {_names(answer)}"
        )

    def _member(self, cd: ComputeDomain) -> Member:
        meta = cd.metadata
        assert meta is not None and meta.uid is not None
        terminating = meta.deletionTimestamp is not None
        admitted = terminating or meta.uid in self._admitted or self._holds_place(cd)
        return Member(meta.uid, meta.name or meta.uid, _created(cd), admitted, terminating)


def _created_then_uid(cd: ComputeDomain) -> tuple[datetime, str]:
    uid = cd.metadata.uid if cd.metadata is not None else None
    return _created(cd), uid or ""


def _names(answer: Admission) -> str:
    """The counted domains by name (all of the refused domain's namespace), deleting ones marked."""
    shown: Iterable[Member] = answer.counted[:NAMED_DOMAINS]
    names = [m.name + (" (being deleted)" if m.terminating else "") for m in shown]
    return and_more(names, len(answer.counted)) or "none"
