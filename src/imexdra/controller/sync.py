"""Publishes one domain's membership: its ComputeDomainClique objects and its status.

Runs as the last step of every reconcile of a live domain, from the caches only; it writes only what
differs from what is published (read through the overlay, so our own last write counts as published).
Reconciles of one domain are serialized by the work queue and pod events reach it through a short
batching window, which together make this the single, conflict-free writer of cliques and status
(contract in ``daemons``; pure rules in ``membership``; the IMEX-health roll-up in ``imexhealth``).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime
from typing import Any

import msgspec
import structlog

from imexdra.api.computedomain import ComputeDomain, ComputeDomainStatus, Condition
from imexdra.api.computedomainclique import ComputeDomainClique, ComputeDomainDaemonInfo, clique_name
from imexdra.api.constants import (
    CLIQUE_LABEL_KEY,
    COMPUTE_DOMAIN_LABEL_KEY,
    ClaimTemplateTarget,
    ComputeDomainStatusValue,
    ConditionStatus,
)
from imexdra.api.imexpeers import REPORT_SPACING_POLLS
from imexdra.common.kube.models.meta_v1 import ObjectMeta, OwnerReference
from imexdra.common.machinery.events import EventRecorder
from imexdra.controller import imexhealth, membership, nodehealth, reasons
from imexdra.controller.apiwrites import ApiWrites
from imexdra.controller.caches import Caches
from imexdra.controller.config import ControllerConfig
from imexdra.controller.daemons import DaemonPod, one_per_node
from imexdra.controller.imexhealth import ImexHealth
from imexdra.controller.isolation import CHANNEL_ALLOCATED, Verdict
from imexdra.controller.membership import CliqueMembers
from imexdra.controller.metrics import DomainStatusMetrics
from imexdra.controller.placement import Home, home_of
from imexdra.controller.render import domain_uid

_log = structlog.get_logger(__name__)


def channel_conditions(cd: ComputeDomain, verdict: Verdict, now: datetime) -> list[Condition]:
    """The domain's conditions with ``ChannelAllocated`` set from ``verdict``.

    The transition time moves only when the condition's status does, and an unchanged condition is
    kept as it is, so a verdict that says the same thing again writes nothing.
    """
    current = cd.status.conditions if cd.status is not None else []
    value = ConditionStatus.TRUE if verdict.allocated else ConditionStatus.FALSE
    old = next((c for c in current if c.type == CHANNEL_ALLOCATED), None)
    since = (
        old.last_transition_time if old is not None and old.status == value else now.replace(microsecond=0)
    )
    generation = cd.metadata.generation if cd.metadata is not None else None
    new = Condition(
        type=CHANNEL_ALLOCATED,
        status=value,
        last_transition_time=since,
        reason=verdict.reason,
        message=verdict.message,
        observed_generation=generation or 0,
    )
    return [c for c in current if c.type != CHANNEL_ALLOCATED] + [new]


def _without_channel_condition(cd: ComputeDomain) -> list[Condition] | None:
    """The domain's other conditions if it still has a ``ChannelAllocated`` one, else None."""
    current = cd.status.conditions if cd.status is not None else []
    if not any(c.type == CHANNEL_ALLOCATED for c in current):
        return None
    return [c for c in current if c.type != CHANNEL_ALLOCATED]


def clique_id_of(clique: ComputeDomainClique, uid: str) -> str:
    """The clique ID a clique object stands for (its label, else the part of its name after the UID)."""
    meta = clique.metadata
    label: str | None = (meta.labels or {}).get(CLIQUE_LABEL_KEY) if meta else None
    if label:
        return label
    return (meta.name or "").removeprefix(f"{uid}.") if meta else ""


class MembershipSync:
    """Computes and writes cliques and status for one domain at a time."""

    def __init__(
        self,
        config: ControllerConfig,
        caches: Caches,
        writer: ApiWrites,
        events: EventRecorder,
        metrics: DomainStatusMetrics,
        *,
        clock: Callable[[], float] = time.monotonic,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._config = config
        self._caches = caches
        self._writer = writer
        self._events = events
        self._metrics = metrics
        self._clock = clock
        self._now = now
        #: When each domain last published (cliques or status), for ``config.min_publish_interval``.
        self._last_publish: dict[str, float] = {}
        #: When each domain's status was last written, for ``config.status_rollup_interval``.
        self._last_status: dict[str, float] = {}
        self._health = ImexHealth(events)

    async def sync(
        self, cd: ComputeDomain, verdict: Verdict | None = None, *, guarded: bool = False
    ) -> float | None:
        """Bring the domain's cliques (driver-managed, gate on) and status in line with its daemons.

        Returns a delay when a change is due but the domain published less than
        ``config.min_publish_interval`` ago, or when only the status's roll-up of the cliques is due
        and the status was written less than ``config.status_rollup_interval`` ago: the change is
        then written on the next pass. With a
        channel-isolation ``verdict`` the status also carries the domain's number and its
        ``ChannelAllocated`` condition, and is Ready only if the number is its own and its template
        exists; ``guarded`` makes the write conditional on the domain's resourceVersion.
        """
        home = home_of(cd)
        uid = home.uid
        if verdict is not None:
            ready = verdict.allocated and self._has_workload_template(home)
            current = cd.status
            recorded = current.channel if current is not None else None
            status = ComputeDomainStatus(
                status=membership.READY if ready else membership.NOT_READY,
                channel=verdict.channel if verdict.channel is not None else recorded,
                conditions=channel_conditions(cd, verdict, self._now()),
            )
            await self._publish_status(cd, status, guarded=guarded)
            return None
        # A domain released from IsolationSwitchPending drops that condition: its status is upstream's.
        others = _without_channel_condition(cd)
        if not self._config.imex_mode.runs_imex_daemons:
            # Ready means the workload claim template exists (docs/host-managed.md), not someone else's
            # template of that name, which the reconciler reports as ClaimTemplateConflict; no nodes.
            ready = self._has_workload_template(home)
            status = ComputeDomainStatus(
                status=membership.READY if ready else membership.NOT_READY, conditions=others or []
            )
            await self._publish_status(cd, status, clear_conditions=others is not None)
            return None
        members = self._health.members(one_per_node(self._caches.daemon_pods(uid)))
        self._report_failing(cd, members)
        cliques_on = self._config.cliques_enabled
        objects = self._caches.cliques_of(home) if cliques_on else []
        if cliques_on:
            published = {clique_id_of(c, uid): list(c.daemons) for c in objects}
        else:
            published = membership.published_from_status(cd.status.nodes if cd.status else [])
        cliques, non_fabric = membership.plan_cliques(
            members, published, max_nodes=self._config.max_nodes_per_imex_domain
        )
        nodes = membership.status_nodes(cliques, non_fabric)
        num_nodes = cd.spec.num_nodes if cd.spec else 0
        base = others if others is not None else (cd.status.conditions if cd.status else [])
        status = ComputeDomainStatus(
            status=membership.global_status(nodes, num_nodes=num_nodes),
            nodes=nodes,
            conditions=self._health.conditions(cd, base, nodes, self._now()),
        )
        self._health.observe(uid, cd, nodes)
        clique_changes = self._clique_changes(home, cliques, objects) if cliques_on else []
        status_due = others is not None or self._status_changed(cd, status)
        if not clique_changes and not status_due:
            self._observe(cd, status)
            return None
        spacing = self._config.min_publish_interval
        entries = {clique_id: members.daemons for clique_id, members in cliques.items()}
        if others is None and imexhealth.only_reports_differ(published, entries, cd.status, status):
            # Daemons' reports are gathered: one publication per report spacing, not one per daemon.
            spacing = max(spacing, self._config.daemon_imex_peers_poll_interval * REPORT_SPACING_POLLS)
        wait = self._last_publish.get(uid, -math.inf) + spacing - self._clock()
        if wait > 0:
            return wait
        self._report_unplaced(cd, cliques.values())
        if clique_changes:
            for change in clique_changes:
                written = await change()
                if isinstance(written, ComputeDomainClique):
                    desired = cliques.get(clique_id_of(written, uid))
                    self._health.after_write(written, desired.daemons if desired else (), written.daemons)
            self._last_publish[uid] = self._clock()
        if not status_due:
            return None
        later = self._rollup_wait(uid, cd, status) if cliques_on and others is None else 0.0
        if later > 0:
            return later
        self._health.record_change(cd, status.conditions)
        written = await self._publish_status(cd, status, clear_conditions=others is not None)
        if written is not None:
            self._health.after_write(written, nodes, written.status.nodes if written.status else ())
        self._last_publish[uid] = self._last_status[uid] = self._clock()
        return None

    def _rollup_wait(self, uid: str, cd: ComputeDomain, desired: ComputeDomainStatus) -> float:
        """How long a status write may wait: > 0 only for a roll-up of what the cliques now publish.

        The domain's global status and a non-fabric node's entry are written at once; fabric nodes'
        entries at most every ``config.status_rollup_interval`` (docs/architecture.md §5.1).
        """
        current = cd.status
        if (
            current is None
            or current.status != desired.status
            or not membership.cliques_carry_the_change(current.nodes, desired.nodes)
        ):
            return 0.0
        return self._last_status.get(uid, -math.inf) + self._config.status_rollup_interval - self._clock()

    def _has_workload_template(self, home: Home) -> bool:
        view = self._caches.template_view
        return any(
            not view.terminating(template)
            for template in self._caches.templates_of(home, ClaimTemplateTarget.WORKLOAD)
        )

    def forget(self, uid: str) -> None:
        """Drop what is remembered about a finalized domain."""
        self._last_publish.pop(uid, None)
        self._last_status.pop(uid, None)
        self._health.forget(uid)

    def _report_failing(self, cd: ComputeDomain, members: list[DaemonPod]) -> None:
        # Repeats of one failure aggregate into one Event series (common.machinery.events).
        nodes = {
            n.metadata.name: n
            for n in self._caches.node_view.by_domain(domain_uid(cd))
            if n.metadata is not None and n.metadata.name
        }
        for _node, note in nodehealth.lost_daemons(members, nodes):
            self._events.record(
                cd, type="Warning", reason=reasons.NODE_NOT_READY, action="ObserveDaemon", note=note
            )
        for member in members:
            if member.failure:
                self._events.record(
                    cd,
                    type="Warning",
                    reason=reasons.DAEMON_FAILING,
                    action="ObserveDaemon",
                    note=f"IMEX daemon on node {member.node_name} keeps failing: {member.failure}",
                )

    def _report_unplaced(self, cd: ComputeDomain, cliques: Iterable[CliqueMembers]) -> None:
        for clique in cliques:
            if clique.unplaced:
                max_nodes = self._config.max_nodes_per_imex_domain
                self._events.record(
                    cd,
                    type="Warning",
                    reason=reasons.CLIQUE_FULL,
                    action="AssignIndex",
                    note=f"clique {clique.clique_id} has no free index below maxNodesPerIMEXDomain "
                    f"({max_nodes}) for node(s) {', '.join(clique.unplaced)}",
                )

    def _clique_changes(
        self, home: Home, desired: dict[str, CliqueMembers], current: list[ComputeDomainClique]
    ) -> list[Callable[[], Awaitable[object]]]:
        """The writes that make the domain's clique objects match ``desired`` (none if they do)."""
        view, uid = self._caches.clique_view, home.uid
        owners = self._owner_references(home)
        by_id = {clique_id_of(c, uid): c for c in current}
        changes: list[Callable[[], Awaitable[object]]] = []
        for clique_id, members in desired.items():
            daemons = list(members.daemons)
            existing = by_id.get(clique_id)
            if existing is None:
                new = self._new_clique(uid, clique_id, daemons, owners)
                changes.append(functools.partial(self._writer.create, new, view))
            elif list(existing.daemons) != daemons or (owners and self._owners(existing) != owners):
                patch: dict[str, Any] = {"daemons": msgspec.to_builtins(daemons) or None}
                if owners:
                    patch["metadata"] = {"ownerReferences": msgspec.to_builtins(owners)}
                changes.append(functools.partial(self._writer.merge_patch, existing, patch, view))
        for clique_id, existing in by_id.items():
            if clique_id not in desired:
                changes.append(functools.partial(self._writer.delete, existing, view, has_finalizers=False))
        return changes

    @staticmethod
    def _owners(clique: ComputeDomainClique) -> list[OwnerReference]:
        return list(clique.metadata.ownerReferences or []) if clique.metadata else []

    def _owner_references(self, home: Home) -> list[OwnerReference]:
        """The domain's DaemonSet in the driver namespace: garbage collection follows it."""
        for ds in self._caches.daemon_sets_of(home):
            meta = ds.metadata
            if meta and meta.uid and meta.name and meta.namespace == self._config.driver_namespace:
                return [OwnerReference(apiVersion="apps/v1", kind="DaemonSet", name=meta.name, uid=meta.uid)]
        return []

    def _new_clique(
        self, uid: str, clique_id: str, daemons: list[ComputeDomainDaemonInfo], owners: list[OwnerReference]
    ) -> ComputeDomainClique:
        return ComputeDomainClique(
            metadata=ObjectMeta(
                name=clique_name(uid, clique_id),
                namespace=self._config.driver_namespace,
                labels={COMPUTE_DOMAIN_LABEL_KEY: uid, CLIQUE_LABEL_KEY: clique_id},
                ownerReferences=owners or None,
            ),
            daemons=daemons,
        )

    @staticmethod
    def _status_changed(cd: ComputeDomain, desired: ComputeDomainStatus) -> bool:
        current = cd.status
        # An unset channel or no conditions leaves the published ones alone (write_status omits them).
        return (
            current is None
            or current.status != desired.status
            or not membership.same_nodes(current.nodes, desired.nodes)
            or (desired.channel is not None and current.channel != desired.channel)
            or (bool(desired.conditions) and current.conditions != desired.conditions)
        )

    async def _publish_status(
        self,
        cd: ComputeDomain,
        desired: ComputeDomainStatus,
        *,
        guarded: bool = False,
        clear_conditions: bool = False,
    ) -> ComputeDomain | None:
        written = None
        if clear_conditions or self._status_changed(cd, desired):
            written = await self._writer.write_status(
                cd, desired, self._caches.domain_view, guarded=guarded, clear_conditions=clear_conditions
            )
            _log.info(
                "ComputeDomain status updated",
                domain=domain_uid(cd),
                status=desired.status.value,
                nodes=len(desired.nodes),
            )
        self._observe(cd, desired)
        return written

    def _observe(self, cd: ComputeDomain, desired: ComputeDomainStatus) -> None:
        uid = domain_uid(cd)
        previous = self._metrics.known(uid)
        self._metrics.observe(uid, desired.status)
        if previous is not None and previous != desired.status:
            self._record_transition(cd, desired)

    def _record_transition(self, cd: ComputeDomain, status: ComputeDomainStatus) -> None:
        if not self._config.imex_mode.runs_imex_daemons:
            template = cd.spec.channel.resource_claim_template.name if cd.spec and cd.spec.channel else ""
            verb = "exists" if status.status == membership.READY else "is missing"
            note = f"workload ResourceClaimTemplate {template} {verb} (HostManagedIMEX)"
        else:
            ready = sum(1 for n in status.nodes if n.status == ComputeDomainStatusValue.READY)
            wanted = cd.spec.num_nodes if cd.spec else 0
            note = f"{ready} of {len(status.nodes)} daemon(s) ready (numNodes {wanted})"
        self._events.record(cd, type="Normal", reason=status.status.value, action="UpdateStatus", note=note)
