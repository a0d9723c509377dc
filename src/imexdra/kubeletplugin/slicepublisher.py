"""Keeps this node's ResourceSlice as published, after restarts and after the kubelet wipes it.

One pool named after the node, one slice (docs/compatibility.md §2.4): created with generateName
``00000-compute-domain.nvidia.com-<node>-``, owned by the Node (``controller: true``, so it goes with
the Node), generation 1 at first. A watch of this driver's slices on this node re-runs the sync after
any change: an unchanged slice costs nothing; a changed one is updated in place at the same generation;
an extra, mis-indexed or older-generation slice is deleted; a missing one is created (generation + 1
over what was seen). The kubelet deletes a node's slices when it restarts and when a plugin stays
disconnected, so reacting to deletions matters.

Shutdown does not delete the slice — upstream does not either: the kubelet wipes a driver's slices once
its plugin has been gone for a while, and the owner reference removes them with the Node.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, cast

import structlog
from lightkube import AsyncClient
from lightkube.models.meta_v1 import ObjectMeta, OwnerReference
from lightkube.models.resource_v1 import ResourceSliceSpec
from lightkube.resources.resource_v1 import ResourceSlice

from imexdra.api.constants import DRIVER_NAME
from imexdra.common.errors import DriverError
from imexdra.common.informer import EventHandler, Informer
from imexdra.common.kube import is_not_found, kube_errors
from imexdra.common.ratelimit import Backoff

_log = structlog.get_logger(__name__)

#: Index prefix of the pool's only slice (upstream: ``%05x`` of the slice index).
SLICE_INDEX_PREFIX = "00000-"
SETTLE_DELAY = 1.0


class SlicePublisher:
    """Publishes one pool with ``devices`` for ``node_name``; ``run()`` until cancelled."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        node_name: str,
        devices: list[dict[str, Any]],
        node_uid: Callable[[], Awaitable[str]],
        settle_delay: float = SETTLE_DELAY,
    ) -> None:
        self._client = client
        self._node_name = node_name
        self._devices = devices
        self._node_uid = node_uid
        self._settle_delay = settle_delay
        self._changed = asyncio.Event()
        self.informer: Informer[ResourceSlice] = Informer(
            client,
            ResourceSlice,
            field_selector=f"spec.driver={DRIVER_NAME},spec.nodeName={node_name}",
            resync_period=600.0,
        )
        self.informer.add_handler(
            EventHandler(
                on_add=lambda _s: self._changed.set(),
                on_update=lambda _o, _n: self._changed.set(),
                on_delete=lambda _s: self._changed.set(),
            )
        )
        self.published = asyncio.Event()

    async def run(self) -> None:
        """Watch and reconcile until cancelled; API failures are retried with backoff."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self.informer.run())
            await self.informer.wait_for_sync()
            backoff = Backoff(base=0.5, cap=30.0)
            while True:
                self._changed.clear()
                try:
                    await self.sync()
                    backoff.reset()
                    self.published.set()
                except DriverError as error:
                    delay = backoff.next_delay()
                    _log.warning("ResourceSlice sync failed", error=str(error), retry_in=round(delay, 2))
                    await asyncio.sleep(delay)
                    continue
                await self._changed.wait()
                await asyncio.sleep(self._settle_delay)  # let a burst of events settle into one sync

    async def sync(self) -> None:
        """Make the cluster hold exactly the desired slice for this node's pool."""
        pool = self._node_name
        slices = [s for s in self.informer.store.objects() if s.spec is not None and s.spec.pool.name == pool]
        generation = max((s.spec.pool.generation for s in slices if s.spec is not None), default=0)
        current = [
            s
            for s in slices
            if s.spec is not None
            and s.spec.pool.generation == generation
            and ((s.metadata and s.metadata.name) or "").startswith(SLICE_INDEX_PREFIX)
        ]
        keep = current[0] if current else None
        for obsolete in slices:
            if obsolete is not keep:
                await self._delete(obsolete)
        if keep is None:
            await self._create(generation + 1)
        elif self._differs(keep, generation):
            await self._update(keep, generation)

    def _desired_spec(self, generation: int) -> dict[str, Any]:
        return {
            "driver": DRIVER_NAME,
            "pool": {"name": self._node_name, "generation": generation, "resourceSliceCount": 1},
            "nodeName": self._node_name,
            "devices": self._devices,
        }

    def _spec_model(self, generation: int) -> ResourceSliceSpec:
        return cast(ResourceSliceSpec, ResourceSliceSpec.from_dict(self._desired_spec(generation)))

    def _differs(self, existing: ResourceSlice, generation: int) -> bool:
        if existing.spec is None:
            return True
        return _essentials(existing.spec.to_dict()) != _essentials(self._desired_spec(generation))

    async def _create(self, generation: int) -> None:
        owner = OwnerReference(
            apiVersion="v1", kind="Node", name=self._node_name, uid=await self._node_uid(), controller=True
        )
        body = ResourceSlice(
            metadata=ObjectMeta(
                generateName=f"{SLICE_INDEX_PREFIX}{DRIVER_NAME}-{self._node_name}-", ownerReferences=[owner]
            ),
            spec=self._spec_model(generation),
        )
        with kube_errors("create ResourceSlice"):
            created = await self._client.create(body)
        self.informer.store.upsert(created)
        _log.info("ResourceSlice published", name=created.metadata.name if created.metadata else None)

    async def _update(self, existing: ResourceSlice, generation: int) -> None:
        body = ResourceSlice(metadata=existing.metadata, spec=self._spec_model(generation))
        with kube_errors("update ResourceSlice"):
            updated = await self._client.replace(body)
        self.informer.store.upsert(updated)
        _log.info("ResourceSlice updated", name=updated.metadata.name if updated.metadata else None)

    async def _delete(self, obsolete: ResourceSlice) -> None:
        name = obsolete.metadata.name if obsolete.metadata else None
        if not name:
            return
        try:
            with kube_errors(f"delete ResourceSlice {name}"):
                await self._client.delete(ResourceSlice, name)
        except DriverError as error:
            if not is_not_found(error):
                raise
        self.informer.store.delete(name)
        _log.info("obsolete ResourceSlice deleted", name=name)


def _essentials(spec: dict[str, Any]) -> dict[str, Any]:
    """The fields this publisher sets; anything the API server defaults is not compared."""
    return {
        "driver": spec.get("driver"),
        "pool": spec.get("pool"),
        "nodeName": spec.get("nodeName"),
        "devices": [
            {"name": device.get("name"), "attributes": device.get("attributes") or {}}
            for device in spec.get("devices") or ()
        ],
    }
