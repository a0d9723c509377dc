"""Keeps this node's pool of ResourceSlices as published, after restarts and after the kubelet wipes them.

One pool of the driver named after the node (docs/compatibility.md §2.4), split into slices of at
most ``MAX_DEVICES_PER_SLICE`` devices, the API's limit: one slice unless the driver publishes more
(the IMEX driver under channel isolation: 2047 devices, 16 slices, docs/channel-isolation.md §5).
Slice ``i`` is created with generateName ``<i as 5 hex digits>-<driver>-<node>-``, owned by the Node
(``controller: true``, so it goes with the Node); every slice says ``resourceSliceCount`` and the
pool's generation, 1 at first.

A watch of this driver's slices on this node re-runs the sync after any change. When every index has
one slice of the newest generation with the wanted content, only slices beyond that (extra, older,
mis-indexed) are deleted; an unchanged pool costs nothing. Otherwise the whole pool is written again
at the next generation — the API requires a pool's generation to change in all its slices whenever
anything in the pool changes, and consumers ignore all but the newest generation — reusing each
index's existing object where there is one, then the rest is deleted. The kubelet deletes a node's
slices when it restarts and when a plugin stays disconnected, so reacting to deletions matters.

Shutdown does not delete the slices — upstream does not either: the kubelet wipes a driver's slices
once its plugin has been gone for a while, and the owner reference removes them with the Node.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import structlog

from imexdra.common.errors import DriverError
from imexdra.common.kube.api import KubeApi
from imexdra.common.kube.client import is_not_found, kube_errors
from imexdra.common.kube.models.meta_v1 import ObjectMeta, OwnerReference
from imexdra.common.kube.models.resource_v1 import ResourceSlice, ResourceSliceSpec
from imexdra.common.machinery.informer import EventHandler, Informer
from imexdra.common.pacing.ratelimit import Backoff

_log = structlog.get_logger(__name__)

#: ``ResourceSliceMaxDevices`` of resource.k8s.io/v1 for devices without taints, counters or list attributes.
MAX_DEVICES_PER_SLICE = 128
SETTLE_DELAY = 1.0


_INDEX = re.compile(r"([0-9a-f]{5})-")


def slice_name_prefix(index: int) -> str:
    """The name prefix of the pool's slice ``index`` (upstream: ``%05x`` of the index)."""
    return f"{index:05x}-"


def _slice_index(obj: ResourceSlice) -> int | None:
    match = _INDEX.match((obj.metadata.name if obj.metadata else None) or "")
    return int(match.group(1), 16) if match else None


def split_devices(
    devices: Sequence[dict[str, Any]], limit: int = MAX_DEVICES_PER_SLICE
) -> list[list[dict[str, Any]]]:
    """``devices`` in publishing order, cut into slices of at most ``limit`` (one slice when empty)."""
    chunks = [list(devices[start : start + limit]) for start in range(0, len(devices), limit)]
    return chunks or [[]]


class SlicePublisher:
    """Publishes ``devices`` (in order, split into slices) as the node's pool; ``run()`` until cancelled."""

    def __init__(
        self,
        client: KubeApi,
        *,
        driver_name: str,
        node_name: str,
        devices: list[dict[str, Any]],
        node_uid: Callable[[], Awaitable[str]],
        settle_delay: float = SETTLE_DELAY,
    ) -> None:
        self._client = client
        self._driver_name = driver_name
        self._node_name = node_name
        self._slices = split_devices(devices)
        self._node_uid = node_uid
        self._settle_delay = settle_delay
        self._changed = asyncio.Event()
        self.informer: Informer[ResourceSlice] = Informer(
            client,
            ResourceSlice,
            field_selector=f"spec.driver={driver_name},spec.nodeName={node_name}",
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
        """Make the cluster hold exactly the desired slices for this node's pool."""
        pool = self._node_name
        slices = [s for s in self.informer.store.objects() if s.spec is not None and s.spec.pool.name == pool]
        generation = max((s.spec.pool.generation for s in slices if s.spec is not None), default=0)
        newest: dict[int, ResourceSlice] = {}
        for candidate in slices:
            index = _slice_index(candidate)
            if (
                index is not None
                and index < len(self._slices)
                and candidate.spec is not None
                and candidate.spec.pool.generation == generation
            ):
                newest.setdefault(index, candidate)
        if len(newest) == len(self._slices) and not any(
            self._differs(existing, index, generation) for index, existing in newest.items()
        ):
            keep = {id(s) for s in newest.values()}
        else:
            keep = await self._write_generation(slices, newest, generation + 1)
        for obsolete in slices:
            if id(obsolete) not in keep:
                await self._delete(obsolete)

    async def _write_generation(
        self, slices: list[ResourceSlice], newest: dict[int, ResourceSlice], generation: int
    ) -> set[int]:
        """Write every slice of the pool at ``generation``; the identities of the objects reused."""
        reusable: dict[int, ResourceSlice] = dict(newest)
        for candidate in slices:
            index = _slice_index(candidate)
            if index is not None and index < len(self._slices):
                reusable.setdefault(index, candidate)
        kept: set[int] = set()
        for index in range(len(self._slices)):
            existing = reusable.get(index)
            if existing is None:
                await self._create(index, generation)
            else:
                await self._update(existing, index, generation)
                kept.add(id(existing))
        return kept

    def _desired_spec(self, index: int, generation: int) -> dict[str, Any]:
        return {
            "driver": self._driver_name,
            "pool": {
                "name": self._node_name,
                "generation": generation,
                "resourceSliceCount": len(self._slices),
            },
            "nodeName": self._node_name,
            "devices": self._slices[index],
        }

    def _spec_model(self, index: int, generation: int) -> ResourceSliceSpec:
        return ResourceSliceSpec.from_dict(self._desired_spec(index, generation))

    def _differs(self, existing: ResourceSlice, index: int, generation: int) -> bool:
        if existing.spec is None:
            return True
        return essentials(existing.spec.to_dict()) != essentials(self._desired_spec(index, generation))

    async def _create(self, index: int, generation: int) -> None:
        owner = OwnerReference(
            apiVersion="v1", kind="Node", name=self._node_name, uid=await self._node_uid(), controller=True
        )
        body = ResourceSlice(
            metadata=ObjectMeta(
                generateName=f"{slice_name_prefix(index)}{self._driver_name}-{self._node_name}-",
                ownerReferences=[owner],
            ),
            spec=self._spec_model(index, generation),
        )
        with kube_errors("create ResourceSlice"):
            created = await self._client.create(body)
        self.informer.store.upsert(created)
        _log.info(
            "ResourceSlice published",
            name=created.metadata.name if created.metadata else None,
            generation=generation,
        )

    async def _update(self, existing: ResourceSlice, index: int, generation: int) -> None:
        body = ResourceSlice(metadata=existing.metadata, spec=self._spec_model(index, generation))
        with kube_errors("update ResourceSlice"):
            updated = await self._client.replace(body)
        self.informer.store.upsert(updated)
        _log.info(
            "ResourceSlice updated",
            name=updated.metadata.name if updated.metadata else None,
            generation=generation,
        )

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
        _log.info("Obsolete ResourceSlice deleted", name=name)


def essentials(spec: dict[str, Any]) -> dict[str, Any]:
    """The fields this publisher sets; anything the API server defaults is not compared.

    A device's binding conditions are among them: turning gate ComputeDomainBindingConditions on or
    off changes nothing else, and a slice left as it was would keep every new claim without them.
    """
    return {
        "driver": spec.get("driver"),
        "pool": spec.get("pool"),
        "nodeName": spec.get("nodeName"),
        "devices": [
            {
                "name": device.get("name"),
                "attributes": device.get("attributes") or {},
                "bindingConditions": device.get("bindingConditions") or [],
                "bindingFailureConditions": device.get("bindingFailureConditions") or [],
            }
            for device in spec.get("devices") or ()
        ],
    }
