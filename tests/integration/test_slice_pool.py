"""A node's pool of many ResourceSlices against the real apiserver (channel isolation's 2047 devices).

The publisher splits the devices into slices of at most 128, all of one generation with
``resourceSliceCount`` set; after a slice is deleted or changed behind its back it writes the whole pool
again at the next generation, and leaves an unchanged pool alone. A Node object without a kubelet
owns the slices, so nothing else wipes or reads them.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from imexdra.api.constants import DRIVER_NAME
from imexdra.api.imexmode import HOST_MANAGED_IMEX
from imexdra.common.kube.kubeclient import KubeClient
from imexdra.common.kube.models.core_v1 import Node as NodeResource
from imexdra.common.kube.models.resource_v1 import ResourceSlice
from imexdra.dra.slicepublisher import SlicePublisher
from imexdra.kubeletplugin.slices import slice_devices
from tests.support.waiting import eventually


@pytest.fixture
async def pool(kube: KubeClient) -> AsyncIterator[str]:
    """A kubelet-less Node (the pool's name); deleting it takes its slices (owner references)."""
    name = f"pool-{uuid.uuid4().hex[:6]}"
    await kube.create(NodeResource.from_dict({"metadata": {"name": name}}))
    yield name
    await kube.delete(NodeResource, name)


async def slices_of(kube: KubeClient, pool: str) -> list[ResourceSlice]:
    """The pool's slices in the API, by name."""
    found = [s async for s in kube.list(ResourceSlice, fields={"spec.nodeName": pool})]
    return sorted(found, key=lambda s: (s.metadata.name if s.metadata else "") or "")


def complete(slices: list[ResourceSlice], count: int, generation: int) -> bool:
    """``count`` slices, all at ``generation`` and saying so, one per index 00000- .. count-1."""
    names = [(s.metadata.name if s.metadata else "") or "" for s in slices]
    return (
        len(slices) == count
        and all(s.spec is not None and s.spec.pool.generation == generation for s in slices)
        and all(s.spec is not None and s.spec.pool.resourceSliceCount == count for s in slices)
        and [n[:6] for n in names] == [f"{i:05x}-" for i in range(count)]
    )


def _cached(publisher: SlicePublisher, generation: int) -> bool:
    cached = [s for s in publisher.informer.store.objects() if s.spec is not None]
    return len(cached) == 16 and all(s.spec.pool.generation == generation for s in cached)


def device_ids(slices: list[ResourceSlice]) -> list[int]:
    """Every published device's ``id`` attribute, in slice order."""
    ids: list[int] = []
    for s in slices:
        for device in (s.spec.devices if s.spec is not None else None) or []:
            number = (device.attributes or {})["id"].int
            assert number is not None
            ids.append(number)
    return ids


async def test_channel_isolation_pool_is_sixteen_slices_rewritten_as_one(
    kube: KubeClient, api: KubeClient, pool: str
) -> None:
    """2047 devices: 16 slices at generation 1; one deleted → all 16 at generation 2, same objects
    reused where they exist; one edited by someone else → generation 3; an unchanged pool is left alone."""

    async def node_uid() -> str:
        node = await kube.get(NodeResource, pool)
        return str(node.metadata.uid)  # type: ignore[union-attr]

    devices = slice_devices(imex=HOST_MANAGED_IMEX, channel_isolation=True)
    publisher = SlicePublisher(
        api, driver_name=DRIVER_NAME, node_name=pool, devices=devices, node_uid=node_uid, settle_delay=0.1
    )
    task = asyncio.create_task(publisher.run())

    async def at(generation: int) -> list[ResourceSlice] | None:
        current = await slices_of(kube, pool)
        return current if complete(current, 16, generation) else None

    try:
        first = await eventually("16 slices at generation 1", lambda: at(1), within=60)
        assert device_ids(first) == list(range(1, 2048))
        assert [len(s.spec.devices or []) for s in first if s.spec is not None] == [128] * 15 + [127]

        gone = first[5].metadata.name
        await kube.delete(ResourceSlice, gone)
        second = await eventually("the pool rewritten at generation 2", lambda: at(2), within=60)
        kept = {s.metadata.name for s in first if s.metadata} - {gone}
        assert kept <= {s.metadata.name for s in second if s.metadata}
        assert device_ids(second) == list(range(1, 2048))

        edited: dict[str, Any] = second[0].to_dict()
        edited["spec"]["devices"] = edited["spec"]["devices"][:3]
        await kube.replace(ResourceSlice.from_dict(edited))
        third = await eventually("the pool rewritten at generation 3", lambda: at(3), within=60)
        assert device_ids(third) == list(range(1, 2048))

        versions = {s.metadata.name: s.metadata.resourceVersion for s in third if s.metadata}
        await eventually("the publisher's cache at generation 3", lambda: _cached(publisher, 3), within=10)
        await publisher.sync()  # nothing to do: no write
        again = await slices_of(kube, pool)
        assert {s.metadata.name: s.metadata.resourceVersion for s in again if s.metadata} == versions
    finally:
        task.cancel()
