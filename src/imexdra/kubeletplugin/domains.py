"""The plugin's view of ComputeDomains, their IMEX daemons' readiness, and its own Node's labels.

- ``ComputeDomainCache``: an informer over ComputeDomains in all namespaces, indexed by UID (10 min
  resync), as upstream's ComputeDomain manager. Lookups wait for the first LIST, so a claim prepared
  right after registration is never refused as "ComputeDomain not found" merely because the cache
  was still empty (upstream's race, docs/compatibility.md §3.2).
- ``CliqueReadiness``: is this node's daemon of a domain Ready? In this project the controller alone
  writes ComputeDomainClique objects and ComputeDomain status (single writer). The node is ready when
  the clique ``<CD UID>.<clique ID>`` in the driver namespace lists this node's daemon as Ready (gate
  ``ComputeDomainCliques``), or when the domain's ``status.nodes`` does (the path for nodes without a
  clique). The status is read from the cache first: it costs no request, and either source suffices.
- ``NodeLabeler``: the ``resource.nvidia.com/computeDomain`` label by GET + full Update with retry on
  409, as upstream, so upstream's RBAC (nodes ``update``) suffices; a change is first tried
  on the node as this process last saw it, so labelling usually costs one request. The optional
  ``nvidia.com/gpu.clique`` label uses merge patches (``patch``), as upstream.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import structlog
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node

from imexdra.api.computedomain import ComputeDomain
from imexdra.api.computedomainclique import ComputeDomainClique, clique_name
from imexdra.api.constants import GPU_CLIQUE_NODE_LABEL_KEY, NODE_LABEL_KEY, ComputeDomainStatusValue
from imexdra.common.errors import DriverError, RetryableError
from imexdra.common.informer import EventHandler, Informer
from imexdra.common.kube import collection_path, http_client, kube_errors, raise_for_status, retry_on_conflict
from imexdra.common.pulse import Pulse
from imexdra.common.store import index_by_uid
from imexdra.kubeletplugin.applyconfig import DomainInfo

_log = structlog.get_logger(__name__)

RESYNC_PERIOD = 600.0
_UID_INDEX = "computeDomainUID"


class LabelConflictError(RetryableError):
    """The node is labelled for a different ComputeDomain (one domain per node)."""


class ComputeDomainCache:
    """ComputeDomains of all namespaces by UID; ``run()`` keeps it current.

    ``changes`` fires on every domain added, deleted or changed in status (not on resyncs): prepare
    retries waiting for a daemon's readiness wake on it (docs/errors.md §3.3).
    """

    def __init__(self, client: AsyncClient, *, resync_period: float = RESYNC_PERIOD) -> None:
        self.informer: Informer[ComputeDomain] = Informer(
            client, ComputeDomain, indexers={_UID_INDEX: index_by_uid}, resync_period=resync_period
        )
        self.changes = Pulse()
        self.informer.add_handler(
            EventHandler(
                on_add=lambda _cd: self.changes.fire(),
                on_update=lambda old, new: self.changes.fire() if old.status != new.status else None,
                on_delete=lambda _cd: self.changes.fire(),
            )
        )

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
        return DomainInfo(uid=uid, name=domain.metadata.name or "", namespace=domain.metadata.namespace or "")

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
    """``DaemonReadiness`` from what the controller writes: cliques, then the domain's status."""

    def __init__(
        self,
        client: AsyncClient,
        domains: ComputeDomainCache,
        *,
        node_name: str,
        namespace: str,
        cliques_enabled: bool,
    ) -> None:
        self._client = client
        self._domains = domains
        self._node_name = node_name
        self._namespace = namespace
        self._cliques_enabled = cliques_enabled

    async def node_ready(self, domain: DomainInfo, clique_id: str) -> bool:
        """True when this node's daemon of ``domain`` is recorded Ready."""
        if await self._domains.node_status_ready(domain.uid, self._node_name):
            return True
        if not (self._cliques_enabled and clique_id):
            return False
        name = clique_name(domain.uid, clique_id)
        try:
            with kube_errors(f"get ComputeDomainClique {self._namespace}/{name}"):
                clique = await self._client.get(ComputeDomainClique, name, namespace=self._namespace)
        except DriverError as error:
            _log.debug("clique not readable; not ready", clique=name, error=str(error))
            return False
        return any(
            daemon.node_name == self._node_name and daemon.status == ComputeDomainStatusValue.READY
            for daemon in clique.daemons
        )


class NodeLabeler:
    """The labels of the node, as raw JSON (no typed models: a Node is large and this path is hot)."""

    def __init__(self, client: AsyncClient, node_name: str) -> None:
        self._client = client
        self._http = http_client(client)
        self._path = f"{collection_path(client, Node, None)}/{node_name}"
        self.node_name = node_name
        #: The node as of this process' last read or write of it (may be stale: writes are conditional).
        self._last: dict[str, Any] | None = None

    async def node_uid(self) -> str:
        """The node's UID, read fresh (a re-registered node gets a new one)."""
        uid = (await self._get()).get("metadata", {}).get("uid")
        if not uid:
            raise RetryableError(f"node {self.node_name} has no UID")
        return str(uid)

    async def add(self, domain_uid: str) -> None:
        """Label the node for ``domain_uid``; a label for another domain is a ``LabelConflictError``."""

        def change(current: str | None) -> str | None:
            if current and current != domain_uid:
                raise LabelConflictError(
                    f"label already exists for a different ComputeDomain: node {self.node_name} has "
                    f"{NODE_LABEL_KEY}={current}, this claim needs {domain_uid}"
                )
            return domain_uid

        await self._set_label(change, action=f"label node {self.node_name}")

    async def remove(self, domain_uid: str) -> None:
        """Remove the label if it names ``domain_uid``; otherwise leave the node alone."""
        await self._set_label(
            lambda current: None if current == domain_uid else current,
            action=f"unlabel node {self.node_name}",
        )

    async def _set_label(self, change: Callable[[str | None], str | None], *, action: str) -> None:
        """Apply ``change`` to the label with a full Update (409 on a stale resourceVersion, retried).

        A change is first tried on the node as last seen, costing one request; a conflict means
        someone else wrote the node since, and the next try starts from a fresh GET. Any other
        verdict ("nothing to change", "another domain's label") is never drawn from the old copy:
        that takes a GET, as upstream does every time.
        """
        attempts = 0

        async def attempt() -> None:
            nonlocal attempts
            attempts += 1
            node = self._last if attempts == 1 and _would_write(change, self._last) else None
            if node is None:
                node = await self._get()
            current = _label(node)
            wanted = change(current)
            if wanted == current:
                return
            labels = {k: v for k, v in (node["metadata"].get("labels") or {}).items() if k != NODE_LABEL_KEY}
            if wanted is not None:
                labels[NODE_LABEL_KEY] = wanted
            await self._put({**node, "metadata": {**node["metadata"], "labels": labels}})
            _log.info(
                "node label changed", node=self.node_name, label=NODE_LABEL_KEY, old=current, new=wanted
            )

        await retry_on_conflict(attempt, action=action)

    async def _get(self) -> dict[str, Any]:
        action = f"get node {self.node_name}"
        with kube_errors(action):
            response = await self._http.get(self._path)
        await raise_for_status(response, action)
        self._last = msgspec.json.decode(response.content)
        return self._last

    async def _put(self, node: dict[str, Any]) -> None:
        action = f"update node {self.node_name}"
        with kube_errors(action):
            response = await self._http.put(
                self._path, content=msgspec.json.encode(node), headers={"Content-Type": "application/json"}
            )
        await raise_for_status(response, action)
        self._last = msgspec.json.decode(response.content)

    async def set_gpu_clique(self, clique_id: str | None) -> None:
        """Merge-patch ``nvidia.com/gpu.clique`` to ``clique_id`` (None removes it).

        The answer becomes the node as last seen: kept from before the patch, that copy would be one
        write behind, and the next ComputeDomain label Update on it a certain 409.
        """
        patch: dict[str, Any] = {"metadata": {"labels": {GPU_CLIQUE_NODE_LABEL_KEY: clique_id}}}
        action = f"patch node {self.node_name} label {GPU_CLIQUE_NODE_LABEL_KEY}"
        with kube_errors(action):
            response = await self._http.patch(
                self._path,
                content=msgspec.json.encode(patch),
                headers={"Content-Type": "application/merge-patch+json"},
            )
        await raise_for_status(response, action)
        self._last = msgspec.json.decode(response.content)


def _would_write(change: Callable[[str | None], str | None], node: dict[str, Any] | None) -> bool:
    if node is None:
        return False
    try:
        return change(_label(node)) != _label(node)
    except LabelConflictError:
        return False


def _label(node: dict[str, Any]) -> str | None:
    labels = (node.get("metadata") or {}).get("labels") or {}
    value = labels.get(NODE_LABEL_KEY)
    return str(value) if value is not None else None
