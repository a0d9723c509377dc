"""The job-start benchmark's workload (a ComputeDomain and a Job of N pods) and its API connection.

``Api`` makes raw JSON requests and watches on the admin connection (no typed models: less CPU
spent by the benchmark itself).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from typing import Any

from benchlib import (
    DRIVER,
)

from imexdra.common.kube.client import ApiStatusError
from imexdra.common.kube.connection import connect
from imexdra.common.kube.transport import Transport
from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.waiting import poll_async

# -- the workload ---------------------------------------------------------------------------------


CLAIM = "channel"
"""The pod's name for its channel claim."""


def job(name: str, pods: int) -> dict[str, Any]:
    """N workers, one channel claim each from the domain's template; they tolerate every taint."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "restartPolicy": "Never",
                    "tolerations": [{"operator": "Exists"}],
                    "resourceClaims": [{"name": CLAIM, "resourceClaimTemplateName": f"{name}-channel"}],
                    "containers": [
                        {
                            "name": "worker",
                            "image": "imexdra.test/worker:bench",
                            "command": ["sleep", "3600"],
                            "resources": {"claims": [{"name": CLAIM}]},
                        }
                    ],
                },
            },
        },
    }


# -- the API --------------------------------------------------------------------------------------


DELETE_TIMEOUT_S = 300.0


class Api:
    """Raw JSON requests and watches on the admin connection (no typed models: less bench CPU)."""

    def __init__(self, cluster: LocalCluster) -> None:
        connection = connect(cluster.kubeconfig)
        self.http = connection.transport(user_agent="jobstart-bench")
        # A collection DELETE of 256 pods answers only once every pod is gone: far beyond the
        # default timeout on a loaded machine (it lost a finished 256-node run once).
        self.slow = connection.transport(user_agent="jobstart-bench", timeout=DELETE_TIMEOUT_S)
        self.client = connection.kube(field_manager="jobstart-bench")
        self.watch_restarts = 0

    async def close(self) -> None:
        self.http.close()
        self.slow.close()
        self.client.close()

    async def get(self, path: str, **params: str) -> dict[str, Any]:
        response = await self.http.request("GET", path, query=params)
        result: dict[str, Any] = json.loads(response.body)
        return result

    async def exists(self, path: str) -> bool:
        """Whether a GET of ``path`` finds something (False on 404)."""
        return await exists(self.http, path)

    async def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = await self.http.request("POST", path, body=body)
        result: dict[str, Any] = json.loads(response.body)
        return result

    async def patch(self, path: str, body: dict[str, Any]) -> None:
        await self.http.request("PATCH", path, body=body, content_type="application/merge-patch+json")

    async def delete(self, path: str, **params: str) -> None:
        try:
            await self.slow.request("DELETE", path, query=params)
        except ApiStatusError as error:
            if error.code != 404:
                raise

    async def watch(
        self, path: str, on_event: Callable[[str, dict[str, Any]], None], synced: asyncio.Event
    ) -> None:
        """List, then watch from the list's resourceVersion; every object goes to ``on_event``.

        A watch the apiserver ends (e.g. it closes a watcher that fell behind while the machine is
        saturated) is resumed by a fresh list and watch, as an informer would; ``watch_restarts``
        counts them (an object's stage time may then be late by the gap).
        """
        while True:
            try:
                listing = await self.get(path)
                for item in listing["items"]:
                    on_event("ADDED", item)
                synced.set()
                params = {"watch": "1", "resourceVersion": listing["metadata"]["resourceVersion"]}
                async with self.http.stream(path, query=params) as lines:
                    async for line in lines:
                        event = json.loads(line)
                        if event["type"] == "ERROR":  # e.g. 410 Gone: list again
                            break
                        on_event(event["type"], event["object"])
            except (ApiStatusError, ValueError):
                pass
            self.watch_restarts += 1
            await asyncio.sleep(0.2)

    async def watch_all(
        self, sources: Sequence[tuple[str, Callable[[str, dict[str, Any]], None]]]
    ) -> list[asyncio.Task[None]]:
        """A ``watch`` per (path, handler), once each has listed its objects (cancel the tasks to stop)."""
        synced = [asyncio.Event() for _ in sources]
        watches = [
            asyncio.create_task(self.watch(path, handler, event))
            for (path, handler), event in zip(sources, synced, strict=True)
        ]
        await asyncio.gather(*(event.wait() for event in synced))
        return watches

    async def until_slices(self, count: int, within: float = 300) -> None:
        published = 0

        async def all_published() -> bool:
            nonlocal published
            path = "/apis/resource.k8s.io/v1/resourceslices"
            published = len((await self.get(path, fieldSelector=f"spec.driver={DRIVER}"))["items"])
            return published >= count

        await poll_async(
            f"{count} ResourceSlices published",
            all_published,
            within=within,
            interval=0.5,
            explain=lambda: f" ({published} were)",
        )


async def exists(http: Transport, path: str) -> bool:
    """Whether a GET of ``path`` finds something (False on 404)."""
    try:
        await http.request("GET", path)
    except ApiStatusError as error:
        if error.code == 404:
            return False
        raise
    return True
