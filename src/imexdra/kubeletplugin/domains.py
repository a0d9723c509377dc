"""The plugin's view of ComputeDomains and their IMEX daemons' readiness (node labels: ``nodelabels``).

- ``ComputeDomainCache``: an informer over ComputeDomains in all namespaces, indexed by UID (10 min
  resync), as upstream's ComputeDomain manager. Lookups wait for the first LIST, so a claim prepared
  right after registration is never refused as "ComputeDomain not found" merely because the cache
  was still empty (upstream's race, docs/compatibility.md §3.2). A domain's ``status.channel`` comes
  with it (channel isolation; only the controller can write it, docs/channel-isolation.md §2).
- ``CliqueReadiness``: is this node's daemon of a domain Ready? In this project the controller alone
  writes ComputeDomainClique objects and ComputeDomain status (single writer). The node is ready when
  the clique ``<CD UID>.<clique ID>`` in the driver namespace lists this node's daemon as Ready (gate
  ``ComputeDomainCliques``), or when the domain's ``status.nodes`` does (the path for nodes without a
  clique). The status is read from the cache first: it costs no request, and either source suffices.
  The cliques of this node's clique ID are watched (label selector), so a check costs no request
  either, and a change of this node's daemon entry fires ``changes``: a prepare waiting for its daemon
  is retried when the daemon is Ready, not after up to 3 s of backoff (docs/errors.md §3.3).

One ``Pulse``, the cache's ``changes``, is the wake of the prepare retries; both fire it.
"""

from __future__ import annotations

import structlog

from imexdra.api.computedomain import ComputeDomain, ComputeDomainNode
from imexdra.api.computedomainclique import ComputeDomainClique, clique_name
from imexdra.api.constants import CLIQUE_LABEL_KEY, ComputeDomainStatusValue
from imexdra.common.errors import DriverError, RetryableError
from imexdra.common.kube.api import KubeApi
from imexdra.common.kube.client import kube_errors
from imexdra.common.machinery.informer import EventHandler, Informer
from imexdra.common.machinery.store import index_by_uid
from imexdra.common.pacing.pulse import Pulse
from imexdra.kubeletplugin.configs.apply import DomainInfo

_log = structlog.get_logger(__name__)

RESYNC_PERIOD = 600.0
_UID_INDEX = "computeDomainUID"


class ComputeDomainCache:
    """ComputeDomains of all namespaces by UID; ``run()`` keeps it current.

    ``changes`` fires on every domain added or deleted, and on a change of its ``status.channel`` or
    of this node's entry in ``status.nodes`` (not on other nodes' entries, nor on resyncs), and
    ``CliqueReadiness`` fires it too: prepare retries waiting for a daemon's readiness wake on it
    (docs/errors.md §3.3).
    """

    def __init__(self, client: KubeApi, node_name: str, *, resync_period: float = RESYNC_PERIOD) -> None:
        self.informer: Informer[ComputeDomain] = Informer(
            client, ComputeDomain, indexers={_UID_INDEX: index_by_uid}, resync_period=resync_period
        )
        self.changes = Pulse()
        self._node_name = node_name
        self.informer.add_handler(
            EventHandler(
                on_add=lambda _cd: self.changes.fire(),
                on_update=self._updated,
                on_delete=lambda _cd: self.changes.fire(),
            )
        )

    def _updated(self, old: ComputeDomain, new: ComputeDomain) -> None:
        """Wake the retries on what a prepare on this node waits for: its channel, this node's entry.

        Every node's plugin sees every status patch of a domain; waking all their waiting retries on
        each (each retry re-reads the Node to label it) cost 13 wakes x 64 nodes of GETs in the 64-node
        job-start bench (docs/errors.md §3.3).
        """
        if self._waited_for(old) != self._waited_for(new):
            self.changes.fire()

    def _waited_for(self, domain: ComputeDomain) -> tuple[int | None, ComputeDomainNode | None]:
        status = domain.status
        if status is None:
            return None, None
        entry = next((node for node in status.nodes if node.name == self._node_name), None)
        return status.channel, entry

    async def run(self) -> None:
        """List and watch until cancelled."""
        await self.informer.run()

    async def get(self, uid: str) -> DomainInfo | None:
        """The domain with ``uid`` once the cache has synced; None if there is none.

        Raises:
            RetryableError: more than one object carries the UID (a corrupt cache).

        """
        domain = await self._object(uid)
        if domain is None or domain.metadata is None:
            return None
        return DomainInfo(
            uid=uid,
            name=domain.metadata.name or "",
            namespace=domain.metadata.namespace or "",
            channel=domain.status.channel if domain.status is not None else None,
        )

    async def node_status_ready(self, uid: str, node_name: str) -> bool:
        """Whether the domain's ``status.nodes`` lists ``node_name`` as Ready."""
        domain = await self._object(uid)
        status = domain.status if domain is not None else None
        return any(
            node.name == node_name and node.status == ComputeDomainStatusValue.READY
            for node in (status.nodes if status is not None else ())
        )

    def uids(self) -> set[str] | None:
        """Every cached domain's UID, or None before the first LIST (nothing is known yet)."""
        if not self.informer.has_synced():
            return None
        return {
            obj.metadata.uid for obj in self.informer.store.objects() if obj.metadata and obj.metadata.uid
        }

    async def _object(self, uid: str) -> ComputeDomain | None:
        await self.informer.wait_for_sync()
        hits = self.informer.store.by_index(_UID_INDEX, uid)
        if len(hits) > 1:
            raise RetryableError(f"found {len(hits)} ComputeDomains with UID {uid}")
        return hits[0] if hits else None


class CliqueReadiness:
    """``DaemonReadiness`` from what the controller writes: the domain's status, then this node's cliques.

    ``clique_id`` is the node's clique ID at startup: ``informer`` (None without a clique ID or with
    the cliques gate off; the plugin runs it) watches the cliques carrying it, and a change of this
    node's entry fires ``changes`` (the plugin passes the domain cache's). Should the
    node's clique ID change later (a fabric re-registration), a clique of the new ID is read with a GET,
    as is any clique before the watch has synced.
    """

    def __init__(
        self,
        client: KubeApi,
        domains: ComputeDomainCache,
        *,
        node_name: str,
        namespace: str,
        clique_id: str,
        cliques_enabled: bool,
        changes: Pulse,
    ) -> None:
        self._client = client
        self._domains = domains
        self._changes = changes
        self._node_name = node_name
        self._namespace = namespace
        self._cliques_enabled = cliques_enabled
        self._watched = clique_id if cliques_enabled else ""
        self.informer: Informer[ComputeDomainClique] | None = None
        if self._watched:
            self.informer = Informer(
                client,
                ComputeDomainClique,
                namespace=namespace,
                label_selector=f"{CLIQUE_LABEL_KEY}={self._watched}",
            )
            self.informer.add_handler(
                EventHandler(
                    on_add=lambda clique: self._changed(None, clique),
                    on_update=self._changed,
                    on_delete=lambda clique: self._changed(clique, None),
                )
            )

    async def node_ready(self, domain: DomainInfo, clique_id: str) -> bool:
        """True when this node's daemon of ``domain`` is recorded Ready."""
        if await self._domains.node_status_ready(domain.uid, self._node_name):
            return True
        if not (self._cliques_enabled and clique_id):
            return False
        name = clique_name(domain.uid, clique_id)
        # Before the watch's first LIST (or while it cannot list) the clique is read with a GET.
        if self.informer is not None and clique_id == self._watched and self.informer.has_synced():
            return self._daemon_status(self.informer.store.get_by_name(name, self._namespace)) == (
                ComputeDomainStatusValue.READY
            )
        try:
            with kube_errors(f"get ComputeDomainClique {self._namespace}/{name}"):
                clique = await self._client.get(ComputeDomainClique, name, namespace=self._namespace)
        except DriverError as error:
            _log.debug("Clique not readable; not ready", clique=name, error=str(error))
            return False
        return self._daemon_status(clique) == ComputeDomainStatusValue.READY

    def _changed(self, old: ComputeDomainClique | None, new: ComputeDomainClique | None) -> None:
        """Wake the prepare retries when this node's daemon entry changed (not on other nodes' entries)."""
        if self._daemon_status(old) != self._daemon_status(new):
            self._changes.fire()

    def _daemon_status(self, clique: ComputeDomainClique | None) -> str | None:
        """The status of the daemon on this node in ``clique``; None when the clique does not list it."""
        for daemon in clique.daemons if clique is not None else ():
            if daemon.node_name == self._node_name:
                return daemon.status
        return None
