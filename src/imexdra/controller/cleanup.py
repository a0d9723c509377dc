"""Removes objects that carry the label of a ComputeDomain that no longer exists.

Such objects are left behind when a domain's finalizer was removed by hand, by an older driver, or by a
crash in a window the deletion path cannot see. Upstream sweeps every 10 minutes; here a sweep also
runs at start and about a second after any watched object shows up with an
unknown domain UID, so leftovers disappear promptly. A sweep works from the caches and writes only for
what it finds:

- claim templates and DaemonSets: delete, then (once terminating) remove our finalizer;
- cliques: delete;
- node labels: remove, but only once the UID has been unknown for ``NODE_LABEL_GRACE_SECONDS``: the
  kubelet plugin labels nodes for domains it has just read, which our cache may not show yet.

Only objects where the vanished domain's own could be are touched (``placement.Places.could_hold``):
daemon objects and cliques in their fixed namespaces under their fixed names, workload templates
(target label ``Workload``) anywhere. A look-alike elsewhere is left alone.

Under HostManagedIMEX only workload claim templates are watched, hence swept: objects of a previous
driver-managed install are not swept, switching modes deletes them first (docs/host-managed.md).
The sweep's place among the cleanups: docs/data-path.md §12.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import structlog

from imexdra.common.machinery.store import object_key
from imexdra.controller.apiwrites import ApiWrites
from imexdra.controller.caches import Caches, domain_label, template_kind
from imexdra.controller.overlay import Overlay
from imexdra.controller.placement import Kind
from imexdra.controller.writes import has_finalizer

#: Work-queue key of a sweep (cannot collide with ``namespace/name``).
SWEEP_KEY = "~sweep"
NODE_LABEL_GRACE_SECONDS = 10.0
#: Re-check while stale objects are terminating or node labels are in their grace period.
RECHECK_SECONDS = 5.0

_log = structlog.get_logger(__name__)


class StaleObjectSweeper:
    """One sweep over the caches per call of :meth:`sweep`."""

    def __init__(
        self, caches: Caches, writer: ApiWrites, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._caches = caches
        self._writer = writer
        self._clock = clock
        self._unknown_since: dict[str, float] = {}

    async def sweep(self) -> float | None:
        """Clean up what belongs to vanished domains; return when to look again, if needed."""
        caches = self._caches
        known = caches.known_domains()
        pending = False
        pending |= await self._sweep_has_finalizer(caches.template_view, known, template_kind)
        pending |= await self._sweep_has_finalizer(caches.daemon_set_view, known, lambda _: Kind.DAEMON_SET)
        for clique in caches.clique_view.all():
            uid = self._stale_domain(clique, Kind.CLIQUE, known)
            if uid and caches.clique_view.get(object_key(clique)) is not None:
                _log.info(
                    "Cleanup: stale object found for ComputeDomain",
                    v=1,
                    kind="ComputeDomainClique",
                    key=object_key(clique),
                    domain=uid,
                )
                await self._writer.delete(clique, caches.clique_view, has_finalizers=False)
        pending |= await self._sweep_node_labels(known)
        return RECHECK_SECONDS if pending else None

    def _stale_domain(self, obj: Any, kind: Kind | None, known: set[str]) -> str | None:
        """The unknown domain UID ``obj`` is labelled with, if it is where that domain's own could be."""
        uid = domain_label(obj)
        meta = obj.metadata
        if not uid or uid in known or kind is None or meta is None:
            return None
        return (
            uid if self._caches.places.could_hold(kind, uid, meta.namespace or "", meta.name or "") else None
        )

    async def _sweep_has_finalizer(
        self, view: Overlay[Any], known: set[str], kind_of: Callable[[Any], Kind | None]
    ) -> bool:
        pending = False
        for obj in view.all():
            uid = self._stale_domain(obj, kind_of(obj), known)
            if uid is None:
                continue
            current = view.get(object_key(obj))
            if current is None:
                continue
            pending = True
            _log.info(
                "Cleanup: stale object found for ComputeDomain",
                v=1,
                kind=type(obj).__name__,
                key=object_key(obj),
                domain=uid,
            )
            if not view.terminating(current):
                await self._writer.delete(current, view)
            elif has_finalizer(current):
                await self._writer.remove_finalizer(current, view)
        return pending

    async def _sweep_node_labels(self, known: set[str]) -> bool:
        now = self._clock()
        unknown = {
            uid for node in self._caches.node_view.all() if (uid := domain_label(node)) and uid not in known
        }
        self._unknown_since = {uid: self._unknown_since.get(uid, now) for uid in unknown}
        pending = False
        for node in self._caches.node_view.all():
            uid = domain_label(node)
            if uid not in unknown or self._caches.node_view.get(object_key(node)) is None:
                continue
            assert uid is not None
            if now - self._unknown_since[uid] < NODE_LABEL_GRACE_SECONDS:
                pending = True
                continue
            _log.info(
                "Cleanup: stale node label found for ComputeDomain", v=1, node=object_key(node), domain=uid
            )
            await self._writer.remove_node_label(node, uid, self._caches.node_view)
        return pending
