"""Release workload pods through DRA binding conditions: the controller's half (docs/binding-conditions.md).

Under gate ComputeDomainBindingConditions every channel device carries the binding condition
``IMEXDaemonReady`` and the failure condition ``IMEXDaemonFailed`` (``kubeletplugin.slices``). The
scheduler allocates such a device, reserves the claim for its pod and then holds the pod in PreBind
until one of the two is ``True`` in the claim's ``status.devices``. This module decides, for each such
claim (``claimholds.PendingBinding``), in this order:

1. the claim's ComputeDomainChannelConfig must name a domain **of the claim's own namespace** that is
   not being deleted (docs/tenancy.md): else ``IMEXDaemonFailed`` at once, so the scheduler unreserves
   and the node's channel is free again (no squatting);
2. the allocated node must carry the domain's label, which schedules the domain's daemon there: an
   unlabelled node is labelled (what the plugin's prepare does without the gate); a node labelled for
   another domain is ``IMEXDaemonFailed`` (the pod goes elsewhere; the message names no other domain);
3. when the node's daemon of the domain is Ready as the domain's published membership says (the
   cliques, or ``status.nodes``: what the plugin's prepare checks), ``IMEXDaemonReady``; while that
   daemon keeps failing for ``FAILING_GRACE_SECONDS`` (its ``DaemonFailing`` reason), ``IMEXDaemonFailed``.
   Otherwise it waits: a change of that node's daemon pod or of its entry in the cliques or
   ``status.nodes`` brings the claim back (claims and daemon pods are indexed by domain and node, so
   neither the routing nor the decision reads the rest of the domain).

Under HostManagedIMEX there is no daemon pod and no node label: the host's IMEX readiness is the
node's, which the plugin's prepare checks as without the gate. Step 1 is the whole decision there:
``IMEXDaemonReady`` once the claim's domain is its namespace's, so only a claim that can never be
prepared is held back (docs/binding-conditions.md).

A label this module set is taken back once no claim of the domain's namespace allocated on that node
names the domain any more (a binding that failed, a pod deleted before it was bound), after
``LABEL_RELEASE_DELAY_SECONDS`` so a pod placed again on the same node keeps its daemon. A prepared
claim's label is the plugin's to remove at unprepare, as without the gate; both removals are guarded by
the label's value, so either may come first.

Conditions are appended to the claim's ``status.devices`` by a JSON patch guarded by the claim's
resourceVersion (``Writer.set_device_conditions``): the entries are ours, the allocation stays the
scheduler's, untouched. A claim is not patched twice from the same resourceVersion: until the watch
shows its next version, a second patch could only fail the test. The decision itself is ``decide``, pure.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

import structlog

from imexdra.api.computedomain import ComputeDomain
from imexdra.api.computedomainclique import ComputeDomainClique
from imexdra.api.constants import (
    BINDING_CONDITION_DAEMON_READY,
    BINDING_FAILURE_CONDITION,
    NODE_LABEL_KEY,
    ComputeDomainStatusValue,
)
from imexdra.common.kube.models.core_v1 import Pod
from imexdra.common.machinery.events import EventRecorder, ObjectRef
from imexdra.common.machinery.informer import EventHandler
from imexdra.common.machinery.workqueue import WorkQueue
from imexdra.controller.apiwrites import ApiWrites
from imexdra.controller.caches import Caches, domain_label, own_uid, pod_node
from imexdra.controller.claimholds import ChannelClaim, PendingBinding
from imexdra.controller.overlay import DOMAIN_INDEX
from imexdra.controller.placement import home_of

#: How long a node's daemon must keep failing before its pending claims fail binding (the kubelet's
#: first restarts of a crashing daemon take 10 + 20 + 40 s; one transient failure must not move pods).
FAILING_GRACE_SECONDS = 60.0
#: How long a node label set for a binding outlives the last claim that needed it.
LABEL_RELEASE_DELAY_SECONDS = 10.0

_CLAIM = "claim:"
_LABEL = "label:"

_log = structlog.get_logger(__name__)


class Outcome(StrEnum):
    """What to do with a pending claim."""

    READY = "Ready"
    FAIL = "Fail"
    LABEL = "Label"
    WAIT = "Wait"


@dataclass(frozen=True, slots=True)
class Decision:
    """An outcome and, for a condition, its reason and message (the message names nothing foreign)."""

    outcome: Outcome
    reason: str = ""
    message: str = ""


@dataclass(frozen=True, slots=True)
class Facts:
    """What ``decide`` needs to know about one pending claim, read from the caches."""

    claim_namespace: str
    #: Whether the domain runs IMEX daemons (driver-managed); else the host's IMEX serves every node.
    runs_daemons: bool
    #: The named domain, if it exists **in the claim's namespace**; None otherwise.
    domain: ComputeDomain | None
    terminating: bool
    #: The allocated node's domain label: ``None`` unlabelled, else the UID it names.
    node_label: str | None
    daemon_ready: bool
    #: The daemon's failure, once it has lasted ``FAILING_GRACE_SECONDS``; ``""`` otherwise.
    daemon_failure: str


def decide(binding: PendingBinding, facts: Facts) -> Decision:
    """The next step for ``binding`` (see the module docstring for the order)."""
    if not binding.domain:
        return Decision(
            Outcome.FAIL,
            "NoComputeDomainConfig",
            "the claim asks for an IMEX channel without a ComputeDomainChannelConfig: make the claim "
            "from the resourceClaimTemplate its ComputeDomain names",
        )
    if facts.domain is None:
        return Decision(
            Outcome.FAIL,
            "ComputeDomainNotFound",
            f"no ComputeDomain with UID {binding.domain} in namespace {facts.claim_namespace}: a claim "
            "can use only a ComputeDomain of its own namespace",
        )
    if facts.terminating:
        return Decision(Outcome.FAIL, "ComputeDomainTerminating", "the ComputeDomain is being deleted")
    if not facts.runs_daemons:
        return Decision(
            Outcome.READY,
            "ComputeDomainFound",
            "the claim's ComputeDomain is in its namespace; the host's IMEX readiness is checked at prepare",
        )
    if facts.node_label is None:
        return Decision(Outcome.LABEL)
    if facts.node_label != binding.domain:
        return Decision(
            Outcome.FAIL,
            "NodeInUse",
            f"node {binding.node} runs the IMEX daemon of another ComputeDomain (one domain per node)",
        )
    if facts.daemon_ready:
        return Decision(
            Outcome.READY, "DaemonReady", f"the ComputeDomain's IMEX daemon on node {binding.node} is Ready"
        )
    if facts.daemon_failure:
        return Decision(
            Outcome.FAIL,
            "DaemonFailing",
            f"the ComputeDomain's IMEX daemon on node {binding.node} keeps failing: {facts.daemon_failure}",
        )
    return Decision(Outcome.WAIT)


def node_ready(
    cd: ComputeDomain, cliques_daemons: Iterable[tuple[str, ComputeDomainStatusValue]], node: str
) -> bool:
    """Whether ``node``'s daemon is Ready in the domain's status nodes or its cliques' daemon entries."""
    ready = ComputeDomainStatusValue.READY
    if cd.status is not None and any(n.name == node and n.status == ready for n in cd.status.nodes):
        return True
    return any(name == node and status == ready for name, status in cliques_daemons)


class BindingConditions:
    """Decides every pending binding of our channel devices and takes back the node labels it set."""

    def __init__(
        self,
        caches: Caches,
        writer: ApiWrites,
        events: EventRecorder,
        *,
        runs_daemons: bool,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        assert caches.claims is not None, "needs claims watched"
        assert caches.nodes is not None or not runs_daemons, "driver-managed: needs labelled nodes watched"
        self._runs_daemons = runs_daemons
        self._caches = caches
        self._claims = caches.claims
        self._writer = writer
        self._events = events
        self._clock = clock
        self.queue: WorkQueue[str] = WorkQueue("bindingconditions")
        #: (domain UID, node) → when its daemon was first seen failing, while it keeps failing.
        self._failing_since: dict[tuple[str, str], float] = {}
        #: Claim key → the resourceVersion our last condition patch of it tested, until the cache holds
        #: a newer version (docs/binding-conditions.md, "Writes").
        self._patched_from: dict[str, str] = {}
        self._wire()

    # -- event routing -------------------------------------------------------------------------
    # A change requeues only the claims whose decision it can change: a daemon pod's, those of its
    # node; a clique's or a domain's published entries, those of the nodes whose entry changed. Every
    # change requeuing every claim of the domain made a rollout quadratic in the domain's size
    # (docs/binding-conditions.md, "Cost").

    def _wire(self) -> None:
        caches = self._caches
        self._claims.add_handler(
            EventHandler(on_add=self._claim_seen, on_update=self._claim_changed, on_delete=self._claim_gone)
        )
        caches.domains.add_handler(
            EventHandler(
                on_add=lambda cd: self._requeue_domain(own_uid(cd)),
                on_update=self._domain_changed,
                on_delete=self._domain_gone,
            )
        )
        if caches.cliques is not None:
            caches.cliques.add_handler(
                EventHandler(
                    on_add=lambda new: self._entries_changed(None, new, _clique_entries),
                    on_update=lambda old, new: self._entries_changed(old, new, _clique_entries),
                    on_delete=lambda old: self._entries_changed(old, None, _clique_entries),
                )
            )
        for informer in caches.pods:
            informer.add_handler(
                EventHandler(on_add=self._pod_seen, on_update=self._pod_changed, on_delete=self._pod_seen)
            )

    def _claim_seen(self, claim: ChannelClaim) -> None:
        if claim.binding is not None:
            self.queue.add(_CLAIM + _key(claim))

    def _claim_changed(self, old: ChannelClaim, new: ChannelClaim) -> None:
        if _version(old) != _version(new):
            self._patched_from.pop(_key(new), None)
        self._claim_seen(new)
        if (
            self._runs_daemons
            and old.use is not None
            and old.use.node
            and (new.use is None or (new.use.node, new.use.domain) != (old.use.node, old.use.domain))
        ):
            self._release_later(old.use.node, old.use.domain)

    def _claim_gone(self, claim: ChannelClaim) -> None:
        self._patched_from.pop(_key(claim), None)
        if self._runs_daemons and claim.use is not None and claim.use.node:
            self._release_later(claim.use.node, claim.use.domain)

    def _domain_changed(self, old: ComputeDomain, new: ComputeDomain) -> None:
        """All the domain's claims when it starts terminating; else those of nodes whose entry changed."""
        if own_uid(old) != own_uid(new) or _deleting(old) != _deleting(new):
            self._requeue_domain(own_uid(old))
            self._requeue_domain(own_uid(new))
            return
        self._entries_changed(old, new, _status_entries)

    def _domain_gone(self, cd: ComputeDomain) -> None:
        """A deleted domain's claims fail; its daemons are tracked no longer."""
        uid = own_uid(cd)
        self._requeue_domain(uid)
        for where in [where for where in self._failing_since if where[0] == uid]:
            del self._failing_since[where]

    def _entries_changed(self, old: _T | None, new: _T | None, entries: _Entries[_T]) -> None:
        """Requeue the claims of the nodes whose published status differs between ``old`` and ``new``."""
        before_uid, before = entries(old) if old is not None else (None, {})
        after_uid, after = entries(new) if new is not None else (None, {})
        if before_uid != after_uid:  # relabelled (or added, or deleted): each side's nodes as a whole
            self._requeue_nodes(before_uid, before)
            self._requeue_nodes(after_uid, after)
            return
        self._requeue_nodes(
            after_uid, [n for n in before.keys() | after.keys() if before.get(n) != after.get(n)]
        )

    def _pod_seen(self, pod: Pod) -> None:
        node = pod_node(pod)
        if node is not None:
            self._requeue_nodes(domain_label(pod), (node,))

    def _pod_changed(self, old: Pod, new: Pod) -> None:
        self._pod_seen(new)
        if (domain_label(old), pod_node(old)) != (domain_label(new), pod_node(new)):
            self._pod_seen(old)

    def _release_later(self, node: str, uid: str) -> None:
        self.queue.add_after(f"{_LABEL}{node}/{uid}", LABEL_RELEASE_DELAY_SECONDS)

    def _requeue_domain(self, uid: str | None) -> None:
        if not uid:
            return
        for claim in self._claims.store.by_index(DOMAIN_INDEX, uid):
            self._claim_seen(claim)

    def _requeue_nodes(self, uid: str | None, nodes: Iterable[str]) -> None:
        if not uid:
            return
        for node in nodes:
            for claim in self._caches.pending_claims_on(uid, node):
                self._claim_seen(claim)

    # -- work ----------------------------------------------------------------------------------

    async def process(self, item: str) -> float | None:
        """One queue item: a claim to decide, or a node label to take back if nothing needs it."""
        if item.startswith(_LABEL):
            node, _, uid = item.removeprefix(_LABEL).partition("/")
            await self._release(node, uid)
            return None
        key = item.removeprefix(_CLAIM)
        claim = self._claims.store.get(key)
        if claim is None or claim.binding is None:
            return None
        if self._patched_from.get(key) == _version(claim):
            # Our patch from this very version landed or failed its test; either way another one from
            # it can only fail (422). The claim's next watch event brings it back if still pending.
            return None
        return await self._decide(claim, claim.binding)

    async def _decide(self, claim: ChannelClaim, binding: PendingBinding) -> float | None:
        facts = self._facts(claim, binding)
        decision = decide(binding, facts)
        if decision.outcome is Outcome.LABEL:
            label = await self._writer.add_node_label(binding.node, binding.domain, self._caches.node_view)
            if label == binding.domain:
                _log.info("Node labelled for a pending binding", node=binding.node, domain=binding.domain)
                return None  # the daemon's start and readiness come back as events
            if label is None:
                decision = Decision(Outcome.FAIL, "NodeNotFound", f"node {binding.node} no longer exists")
            else:
                decision = decide(binding, dataclasses.replace(facts, node_label=label))
        if decision.outcome is Outcome.WAIT:
            return self._failing_recheck(binding)
        written = await self._writer.set_device_conditions(
            claim,
            binding,
            condition=BINDING_CONDITION_DAEMON_READY
            if decision.outcome is Outcome.READY
            else BINDING_FAILURE_CONDITION,
            reason=decision.reason,
            message=decision.message,
        )
        self._patched_from[_key(claim)] = _version(claim)  # an error raised above is retried instead
        if not written:
            return None  # the claim changed or went: its watch event brings it back if still pending
        if decision.outcome is Outcome.FAIL:
            self._report_failure(claim, decision)
        _log.info(
            "Binding condition set",
            claim=_key(claim),
            node=binding.node,
            outcome=decision.outcome.value,
            reason=decision.reason,
        )
        return None

    def _facts(self, claim: ChannelClaim, binding: PendingBinding) -> Facts:
        caches = self._caches
        namespace = _namespace(claim)
        key = caches.domain_key(binding.domain) if binding.domain else None
        cd = caches.domain_view.get(key) if key is not None and key.startswith(f"{namespace}/") else None
        node = caches.node_view.get(binding.node)
        label = ((node.metadata.labels or {}).get(NODE_LABEL_KEY) if node and node.metadata else None) or None
        ready = False
        failure = ""
        if cd is not None:
            daemons = ((d.node_name, d.status) for c in caches.cliques_of(home_of(cd)) for d in c.daemons)
            ready = node_ready(cd, daemons, binding.node)
            failure = self._lasting_failure(binding, ready)
        return Facts(
            claim_namespace=namespace,
            runs_daemons=self._runs_daemons,
            domain=cd,
            terminating=cd is not None and caches.domain_view.terminating(cd),
            node_label=label,
            daemon_ready=ready,
            daemon_failure=failure,
        )

    def _lasting_failure(self, binding: PendingBinding, ready: bool) -> str:
        """The node's daemon's failure if it has lasted ``FAILING_GRACE_SECONDS``; tracks when it began."""
        where = (binding.domain, binding.node)
        if ready:
            self._failing_since.pop(where, None)
            return ""
        failures = [
            pod.failure
            for pod in self._caches.daemon_pods_on(binding.domain, binding.node)
            if pod.failure and not pod.ready
        ]
        if not failures:
            self._failing_since.pop(where, None)
            return ""
        since = self._failing_since.setdefault(where, self._clock())
        return failures[0] if self._clock() - since >= FAILING_GRACE_SECONDS else ""

    def _failing_recheck(self, binding: PendingBinding) -> float | None:
        """When to look again at a claim whose daemon is failing but not yet for long enough."""
        since = self._failing_since.get((binding.domain, binding.node))
        if since is None:
            return None
        return max(0.0, FAILING_GRACE_SECONDS - (self._clock() - since)) + 0.1

    def _report_failure(self, claim: ChannelClaim, decision: Decision) -> None:
        """A Warning Event on the claim and on each pod it is reserved for (the pod is placed again)."""
        meta = claim.metadata
        assert meta is not None
        refs = [ObjectRef("resource.k8s.io/v1", "ResourceClaim", meta.name or "", meta.namespace, meta.uid)]
        for pod in claim.use.pods if claim.use is not None else ():
            namespace, _, name = pod.partition("/")
            refs.append(ObjectRef("v1", "Pod", name, namespace))
        for ref in refs:
            self._events.record(
                ref, type="Warning", reason=decision.reason, action="Bind", note=decision.message
            )

    async def _release(self, node_name: str, uid: str) -> None:
        """Remove ``uid``'s label from the node unless a claim of the domain's namespace there needs it."""
        caches = self._caches
        key = caches.domain_key(uid)
        namespace = key.partition("/")[0] if key is not None else None
        for claim in self._claims.store.by_index(DOMAIN_INDEX, uid):
            use = claim.use
            if use is not None and use.node == node_name and _namespace(claim) == namespace:
                return
        node = caches.node_view.get(node_name)
        labels = (node.metadata.labels or {}) if node is not None and node.metadata else {}
        if node is None or labels.get(NODE_LABEL_KEY) != uid:
            return
        await self._writer.remove_node_label(node, uid, caches.node_view)
        _log.info("Node label released: no claim needs it", node=node_name, domain=uid)


def _key(claim: ChannelClaim) -> str:
    return f"{_namespace(claim)}/{_name(claim)}"


def _namespace(claim: ChannelClaim) -> str:
    return (claim.metadata.namespace if claim.metadata else None) or ""


def _name(claim: ChannelClaim) -> str:
    return (claim.metadata.name if claim.metadata else None) or ""


def _version(claim: ChannelClaim) -> str:
    return (claim.metadata.resourceVersion if claim.metadata else None) or ""


def _deleting(cd: ComputeDomain) -> bool:
    return cd.metadata is not None and cd.metadata.deletionTimestamp is not None


_T = TypeVar("_T")
#: An object's domain UID and its published status per node.
_Entries = Callable[[_T], tuple[str | None, dict[str, str]]]


def _clique_entries(clique: ComputeDomainClique) -> tuple[str | None, dict[str, str]]:
    return domain_label(clique), {d.node_name: d.status for d in clique.daemons}


def _status_entries(cd: ComputeDomain) -> tuple[str | None, dict[str, str]]:
    return own_uid(cd), {n.name: n.status for n in cd.status.nodes} if cd.status is not None else {}
