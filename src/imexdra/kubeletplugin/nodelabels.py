"""The node's own labels: ``resource.nvidia.com/computeDomain`` and ``nvidia.com/gpu.clique``.

``NodeLabeler`` sets the ComputeDomain label by GET + full Update with retry on 409, as upstream, so
upstream's RBAC (nodes ``update``) suffices. Every change starts from a fresh GET, and changes of one
process are serialized: an Update from an older copy (this process' previous write) met a 409 whenever
anything else had written the node since (kube-controller-manager's node controllers, the kubelet's
status), which the job-start bench counted (docs/data-path.md §7.4). The label schedules the
domain's IMEX daemon onto the node; one domain per node, so a label naming another domain is a
``LabelConflictError``. The optional ``nvidia.com/gpu.clique`` label uses merge patches (``patch``),
as upstream.

Every prepare attempt of a channel claim labels the node, and a claim waiting for its daemon is
attempted many times: with ``watch`` the node is watched by name, and an ``add`` the watch cache shows
already done costs no request (the 256-node job-start bench made 4,793 GETs of nodes without it,
docs/data-path.md §7.4). Only ``add``'s no-op is read from the cache: a cache that lags behind a removal
is corrected by the next watch event and the next attempt; a ``remove`` skipped on a lagging cache
would leave the label behind, so a removal found unnecessary is confirmed by a fresh GET.

The GET before a write is skipped when it could only repeat what this process already holds: the
node as this process last read or wrote it, when the watch shows that very resourceVersion. The
Update carries that resourceVersion, so the server still refuses it (409, retried from a fresh GET) if
anything changed the node since; the watch check keeps those 409s to writes the watch has not
delivered yet. This takes one round trip off every label change (prepare bench, docs/data-path.md §7.4).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import msgspec
import structlog

from imexdra.api.constants import GPU_CLIQUE_NODE_LABEL_KEY, NODE_LABEL_KEY
from imexdra.common.errors import RetryableError
from imexdra.common.kube.api import KubeApi
from imexdra.common.kube.client import retry_on_conflict
from imexdra.common.kube.models.core_v1 import Node
from imexdra.common.kube.transport import resource_path
from imexdra.common.machinery.informer import Informer
from imexdra.common.machinery.store import resource_version

_log = structlog.get_logger(__name__)


class LabelConflictError(RetryableError):
    """The node is labelled for a different ComputeDomain (one domain per node)."""


class NodeLabeler:
    """The labels of the node, as raw JSON (no typed models: a Node is large and this path is hot).

    Requests go through ``transport`` (the plugin's client); ``watch``, when given, is the client the
    node's watch runs on.
    """

    def __init__(self, transport: KubeApi, node_name: str, *, watch: KubeApi | None = None) -> None:
        self._transport = transport
        self._path = resource_path(Node, node_name)
        self.node_name = node_name
        #: One label change at a time: two prepares of one node would otherwise race each other to a 409.
        self._lock = asyncio.Lock()
        #: The node, watched by name (``watch``); the plugin runs it.
        self.informer: Informer[Node] | None = (
            Informer(watch, Node, field_selector=f"metadata.name={node_name}") if watch is not None else None
        )
        #: The whole node as this process last read or wrote it (raw: an Update must send every field).
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
                # The other domain may be another namespace's: its UID goes to our log only, not into
                # the claim's pod event (docs/tenancy.md, "Events and status").
                _log.info("Node labelled for another ComputeDomain", node=self.node_name, holder=current)
                raise LabelConflictError(
                    f"label already exists for a different ComputeDomain: node {self.node_name} is "
                    f"labelled {NODE_LABEL_KEY} for another ComputeDomain, this claim needs {domain_uid}; "
                    "it waits until that ComputeDomain's pods leave the node"
                )
            return domain_uid

        if self._cached_label() == domain_uid:
            return
        await self._set_label(change, action=f"label node {self.node_name}")

    async def remove(self, domain_uid: str) -> None:
        """Remove the label if it names ``domain_uid``; otherwise leave the node alone."""
        await self._set_label(
            lambda current: None if current == domain_uid else current,
            action=f"unlabel node {self.node_name}",
        )

    def _cached_label(self) -> str | None:
        """The label as the watch last saw it; None when unknown (no watch, not synced, no node)."""
        if self.informer is None or not self.informer.has_synced():
            return None
        node = self.informer.store.get_by_name(self.node_name)
        labels = node.metadata.labels if node is not None and node.metadata is not None else None
        return (labels or {}).get(NODE_LABEL_KEY)

    async def _set_label(self, change: Callable[[str | None], str | None], *, action: str) -> None:
        """Apply ``change`` to the label: GET (unless ``_current`` has the node), then a full Update.

        A 409 is retried from a fresh GET; so is a decision to change nothing made on a held copy.
        """
        fresh = False

        async def attempt() -> None:
            nonlocal fresh
            held = None if fresh else self._current()
            fresh = True  # a retry after a 409 reads fresh
            node = held if held is not None else await self._get()
            current = _label(node)
            wanted = change(current)
            if wanted == current and held is not None:
                # "Nothing to do" must not rest on a copy the watch may lag behind.
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
                "Node label changed", node=self.node_name, label=NODE_LABEL_KEY, old=current, new=wanted
            )

        async with self._lock:
            await retry_on_conflict(attempt, action=action)

    def _current(self) -> dict[str, Any] | None:
        """The held node if the watch shows exactly its resourceVersion; else None (GET it)."""
        if self._last is None or self.informer is None or not self.informer.has_synced():
            return None
        watched = self.informer.store.get_by_name(self.node_name)
        if watched is None or resource_version(watched) != self._last["metadata"].get("resourceVersion"):
            return None
        return self._last

    async def _get(self) -> dict[str, Any]:
        response = await self._transport.request("GET", self._path, action=f"get node {self.node_name}")
        node: dict[str, Any] = msgspec.json.decode(response.body)
        self._last = node
        return node

    async def _put(self, node: dict[str, Any]) -> None:
        self._last = None  # a failed Update leaves the server's copy unknown
        response = await self._transport.request(
            "PUT", self._path, body=node, action=f"update node {self.node_name}"
        )
        self._last = msgspec.json.decode(response.body)

    async def set_gpu_clique(self, clique_id: str | None) -> None:
        """Merge-patch ``nvidia.com/gpu.clique`` to ``clique_id`` (None removes it)."""
        await self._transport.request(
            "PATCH",
            self._path,
            body={"metadata": {"labels": {GPU_CLIQUE_NODE_LABEL_KEY: clique_id}}},
            content_type="application/merge-patch+json",
            action=f"patch node {self.node_name} label {GPU_CLIQUE_NODE_LABEL_KEY}",
        )


def _label(node: dict[str, Any]) -> str | None:
    labels = (node.get("metadata") or {}).get("labels") or {}
    value = labels.get(NODE_LABEL_KEY)
    return str(value) if value is not None else None
