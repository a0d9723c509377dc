"""Small helpers for integration tests: polling and applying manifests."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import yaml

from imexdra_sim.localcluster.cluster import LocalCluster


async def eventually(
    what: str, check: Callable[[], Any | Awaitable[Any]], within: float = 60.0, interval: float = 0.5
) -> Any:
    """Poll a sync or async predicate until it returns something truthy, and return that."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        result = check()
        if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
            result = await result
        if result:
            return result
        if loop.time() > deadline:
            pytest.fail(f"timed out after {within}s waiting for {what}")
        await asyncio.sleep(interval)


def apply(cluster: LocalCluster, *objects: dict[str, Any]) -> None:
    """``kubectl apply`` the given objects as cluster admin."""
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))
