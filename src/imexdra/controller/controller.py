"""Wires informers, the work queue, the reconciler and the sweeper into one running controller.

Event routing (one queue, keyed by the domain's ``namespace/name``; a key is never processed by two
workers at once, and adding a queued key again is free):

- ComputeDomain add/update → the domain, at once (create→Ready latency is one reconcile);
- daemon pods, cliques, claim templates, DaemonSets, nodes → the owning domain (by the CD label), after
  the batching window ``config.debounce_seconds``, so a burst of daemon events costs one reconcile
  (at once while the domain is terminating: each teardown step waits for the previous one's event);
- anything labelled for an unknown domain, or a domain vanishing → a sweep (``cleanup``) a second later;
- with in-use protection, a ResourceClaim whose pods or allocation change → the domain whose channel
  it holds, at once, if that domain is terminating (its deletion may wait for those pods no longer);
- with a per-namespace bound (``quota``), ComputeDomains also feed it, and a domain gone from the
  API requeues the domains of its namespace waiting for a place, oldest first;
- under channel isolation, ResourceClaims and ComputeDomains also feed the channel book, which
  requeues domains waiting for a number, oldest first, when one may have come free; under domain
  isolation ComputeDomains and claim templates feed ``switching``, which requeues held domains when
  the last domain made under channel isolation is gone;
- every ``config.resync_seconds``: every domain again (informer resync) and a sweep;
- under gate ComputeDomainBindingConditions, ``binding`` keeps a queue of its own: claims waiting for
  a binding decision, requeued by changes on their node: its daemon pod, its clique or status entry
  (docs/binding-conditions.md, "Cost").

Workers start only after every informer has listed once, so no reconcile or sweep acts on a half-filled
cache (a sweep on a half-filled cache would take live objects for stale ones).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

import structlog

from imexdra.api.computedomain import ComputeDomain
from imexdra.api.flags.common import ImexIsolation
from imexdra.common.kube.api import KubeApi
from imexdra.common.kube.models.core_v1 import Node
from imexdra.common.machinery.events import EventRecorder
from imexdra.common.machinery.informer import EventHandler, follow_latest
from imexdra.common.machinery.store import KubeObject, object_key
from imexdra.common.machinery.workqueue import WorkQueue, run_workers
from imexdra.controller.binding import BindingConditions
from imexdra.controller.caches import Caches, DaemonSetMeta, domain_label, own_uid
from imexdra.controller.claimholds import ChannelClaim
from imexdra.controller.cleanup import SWEEP_KEY, StaleObjectSweeper
from imexdra.controller.config import ControllerConfig
from imexdra.controller.isolation import ChannelAssigner
from imexdra.controller.metrics import DomainStatusMetrics
from imexdra.controller.netpolicy import DaemonPolicies
from imexdra.controller.quota import NamespaceQuota, holds_place
from imexdra.controller.reconciler import Reconciler
from imexdra.controller.switching import ChannelKindDomains
from imexdra.controller.writes import Writer

#: Delay of a sweep requested by an event (coalesces a burst of stale objects into one sweep).
SWEEP_DELAY_SECONDS = 1.0

_log = structlog.get_logger(__name__)


class Controller:
    """The compute-domain controller of one process (run it only while leading, if electing).

    ``client`` serves the informers and every write; ``events`` records Events.
    """

    def __init__(self, client: KubeApi, config: ControllerConfig, events: EventRecorder) -> None:
        self.config = config
        self.caches = Caches(client, config)
        self.queue: WorkQueue[str] = WorkQueue("computedomain")
        self.metrics = DomainStatusMetrics()
        self.events = events
        writer = Writer(client)
        #: The channel book and its verdicts, under channel isolation only (docs/channel-isolation.md).
        self.assigner: ChannelAssigner | None = None
        #: The domains made under channel isolation, under domain isolation only (``switching``).
        self.channel_kind: ChannelKindDomains | None = None
        if config.imex_isolation is ImexIsolation.CHANNEL:
            self.assigner = ChannelAssigner(
                config.imex_channel_count, name_of=self.caches.domain_key, requeue=self.queue.add
            )
        else:
            self.channel_kind = ChannelKindDomains(requeue=self._requeue_uid)
        #: The per-namespace bound, when one is set (``quota``, docs/tenancy.md "Quotas").
        self.quota: NamespaceQuota | None = None
        if config.max_compute_domains_per_namespace > 0:
            self.quota = NamespaceQuota(
                config.max_compute_domains_per_namespace,
                holds_place=functools.partial(holds_place, self.caches),
                requeue=self.queue.add,
                channels=config.imex_isolation is ImexIsolation.CHANNEL,
            )
        #: The daemons' NetworkPolicies (docs/tenancy.md, "Network"): watched like the other owned kinds.
        self.policies: DaemonPolicies | None = None
        if config.writes_network_policies:
            self.policies = DaemonPolicies(client, config)
            self.caches.informers.extend(self.policies.informers)
        self.reconciler = Reconciler(
            config,
            self.caches,
            writer,
            events,
            self.metrics,
            assigner=self.assigner,
            switching=self.channel_kind,
            quota=self.quota,
            policies=self.policies,
        )
        self.sweeper = StaleObjectSweeper(self.caches, writer)
        #: Binding conditions of our channel devices (docs/binding-conditions.md), under their gate only.
        self.binding: BindingConditions | None = None
        if config.binding_conditions:
            self.binding = BindingConditions(
                self.caches, writer, events, runs_daemons=config.imex_mode.runs_imex_daemons
            )
        self._started = asyncio.Event()
        self._wire()

    def synced(self) -> bool:
        """Whether the caches are filled and the workers run (readiness)."""
        return self._started.is_set()

    async def run(self) -> None:
        """Run until cancelled."""
        async with asyncio.TaskGroup() as group:
            for informer in self.caches.informers:
                group.create_task(informer.run())
            group.create_task(self.events.run())
            await asyncio.gather(*(informer.wait_for_sync() for informer in self.caches.informers))
            _log.info(
                "Informer caches synced",
                domains=len(self.caches.domains.store),
                informers=len(self.caches.informers),
            )
            self.queue.add(SWEEP_KEY)
            group.create_task(self._periodic_sweep())
            group.create_task(run_workers(self.queue, self._process, workers=self.config.workers))
            if self.binding is not None:
                group.create_task(run_workers(self.binding.queue, self.binding.process, workers=8))
            self._started.set()

    async def _process(self, key: str) -> float | None:
        if key == SWEEP_KEY:
            return await self.sweeper.sweep()
        return await self.reconciler.reconcile(key)

    async def _periodic_sweep(self) -> None:
        while True:
            await asyncio.sleep(self.config.resync_seconds)
            self.queue.add(SWEEP_KEY)

    # -- event routing -------------------------------------------------------------------------

    def _wire(self) -> None:
        caches = self.caches
        caches.domains.add_handler(follow_latest(self._domain_changed, self._domain_deleted))
        if self.assigner is not None:
            self._wire_channels(self.assigner)
        if self.quota is not None:
            quota = self.quota
            caches.domains.add_handler(follow_latest(quota.domain_seen, quota.domain_gone))
        if caches.claims is not None and self.config.in_use_protection:
            caches.claims.add_handler(
                EventHandler(
                    on_add=self._claim_changed,
                    on_update=self._claim_changed,
                    on_delete=self._claim_changed,
                )
            )
        if self.channel_kind is not None:
            kinds = self.channel_kind
            caches.domains.add_handler(follow_latest(kinds.domain_seen, kinds.domain_gone))
            caches.templates.add_handler(follow_latest(kinds.template_seen, kinds.template_gone))
        caches.templates.add_handler(self._owned_handler())
        for pod_informer in caches.pods:
            pod_informer.add_handler(self._owned_handler())
        if caches.cliques is not None:
            caches.cliques.add_handler(self._owned_handler())
        for ds_informer in caches.daemon_sets:
            ds_informer.add_handler(self._owned_handler(changed=_metadata_changed))
        if caches.nodes is not None:
            caches.nodes.add_handler(self._owned_handler(changed=_label_changed))
        for policy_informer in self.policies.informers if self.policies else ():
            # A deleted policy is made again; its own updates (by users) are left alone.
            policy_informer.add_handler(EventHandler(on_delete=self._owned_handler().on_delete))

    def _wire_channels(self, assigner: ChannelAssigner) -> None:
        """Feed the channel book every domain's recorded number and every claim's held numbers."""
        self.caches.domains.add_handler(follow_latest(assigner.domain_seen, assigner.domain_gone))
        assert self.caches.claims is not None
        self.caches.claims.add_handler(follow_latest(assigner.claim_seen, assigner.claim_gone))

    def _requeue_uid(self, uid: str) -> None:
        key = self.caches.domain_key(uid)
        if key is not None:
            self.queue.add(key)

    def _domain_changed(self, cd: ComputeDomain) -> None:
        self.queue.add(object_key(cd))

    def _domain_deleted(self, cd: ComputeDomain) -> None:
        uid = own_uid(cd)
        if uid:
            self.metrics.forget(uid)
            self.reconciler.forget(uid)
        self.queue.add_after(SWEEP_KEY, SWEEP_DELAY_SECONDS)

    def _claim_changed(self, *claims: ChannelClaim) -> None:
        """Requeue each terminating domain whose channel the claim held (before or after the change)."""
        for uid in {claim.use.domain for claim in claims if claim.use is not None}:
            key = self.caches.domain_key(uid)
            if key is not None and self.caches.terminating(key):
                self.queue.add(key)

    def _owned_handler(self, changed: Callable[[Any, Any], bool] | None = None) -> EventHandler[Any]:
        def touch(obj: KubeObject) -> None:
            uid = domain_label(obj)
            if not uid:
                return
            key = self.caches.domain_key(uid)
            if key is None:
                self.queue.add_after(SWEEP_KEY, SWEEP_DELAY_SECONDS)
            elif self.caches.terminating(key):
                # A teardown advances one object per event (template deleted, finalizer removed, ...):
                # a batching window per step would add up to a fixed delay on every deletion.
                self.queue.add(key)
            else:
                self.queue.add_after(key, self.config.debounce_seconds)

        def update(old: KubeObject, new: KubeObject) -> None:
            if changed is None or changed(old, new):
                touch(new)
                if domain_label(old) != domain_label(new):
                    touch(old)

        return EventHandler(on_add=touch, on_update=update, on_delete=touch)


def _metadata_changed(old: DaemonSetMeta, new: DaemonSetMeta) -> bool:
    """DaemonSet status churns with every pod (updates with equal metadata); only its lifecycle matters."""
    a, b = old.metadata, new.metadata
    if a is None or b is None:
        return True
    return (a.deletionTimestamp, a.finalizers, a.labels) != (b.deletionTimestamp, b.finalizers, b.labels)


def _label_changed(old: Node, new: Node) -> bool:
    """Node status churns with heartbeats; only the domain label matters here."""
    return domain_label(old) != domain_label(new)
