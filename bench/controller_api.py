"""The controller benchmark's side of the API: the user creating domains, a watch on them, API counters.

``User`` creates and deletes ComputeDomains as a user's tooling would; ``Observer`` watches them and
records when each was first Ready (and with which ``status.channel``) and when it vanished; ``burst``
and ``burst_delete`` create or delete many at once, ``hold`` creates many for a memory reading;
``controller_requests`` (and from it ``apiserver_write_counts`` and ``conflicts_seen``) reads the
apiserver's own counters on the resources the controller writes, which works for any controller
implementation. The phases are in ``controller_bench`` and ``controller_channels``.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections.abc import Callable
from typing import Any

from benchlib import (
    BenchController,
    gathered,
)
from stats import percentile

from imexdra.api.computedomain import ComputeDomain
from imexdra.common.kube.kubeclient import KubeClient, decode
from imexdra.common.kube.transport import Transport, resource_path
from imexdra_sim.builders import compute_domain_model
from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.promtext import Samples, apiserver_metrics, metric
from imexdra_sim.waiting import WaitTimeoutError

NAMESPACE = "bench"
#: Every resource a ComputeDomain controller writes (ours: the daemons' NetworkPolicy too, which
#: upstream does not make; counted so the apiserver's figure of ours is whole).
CONTROLLER_RESOURCES = (
    "computedomains",
    "computedomaincliques",
    "resourceclaimtemplates",
    "daemonsets",
    "networkpolicies",
    "nodes",
)
WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE")


def domain(name: str) -> ComputeDomain:
    return compute_domain_model(name, NAMESPACE, template=f"{name}-ch")


class User:
    """Creates and deletes domains as a user's tooling would.

    It uses the lean transport so that the bench's own CPU use slows the controller it measures as
    little as possible.
    """

    def __init__(self, transport: Transport) -> None:
        self.transport = transport

    async def create(self, name: str) -> None:
        path = resource_path(ComputeDomain, namespace=NAMESPACE)
        await self.transport.request("POST", path, body=domain(name))

    async def delete(self, name: str) -> None:
        await self.transport.request("DELETE", resource_path(ComputeDomain, name, namespace=NAMESPACE))


class Observer:
    """A watch on the bench namespace recording when each domain was first Ready and when it vanished."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self.ready: dict[str, float] = {}
        #: ``status.channel`` as the domain became Ready (None under domain isolation).
        self.channels: dict[str, int | None] = {}
        self.gone: dict[str, float] = {}
        self.changed = asyncio.Event()

    async def run(self) -> None:
        """Watch until cancelled, again from the last resourceVersion whenever the server ends a watch."""
        version = ""
        while True:
            async with self.client.watch(
                ComputeDomain, namespace=NAMESPACE, resource_version=version
            ) as events:
                async for event in events:
                    if event.type not in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"):
                        continue
                    obj = decode(event, ComputeDomain)
                    version = (obj.metadata.resourceVersion if obj.metadata else None) or version
                    if event.type != "BOOKMARK":
                        self._record(event.type, obj)

    def _record(self, op: str, obj: ComputeDomain) -> None:
        now = time.monotonic()
        name = obj.metadata.name if obj.metadata else None
        if name is None:
            return
        if op == "DELETED":
            self.gone.setdefault(name, now)
        elif obj.status is not None and obj.status.status == "Ready" and name not in self.ready:
            self.ready[name] = now
            self.channels[name] = obj.status.channel
        self.changed.set()

    async def until(self, check: Callable[[], bool], within: float) -> None:
        """Until ``check`` holds, looked at again whenever the watch saw a change (no polling)."""
        deadline = time.monotonic() + within
        while not check():
            self.changed.clear()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WaitTimeoutError("the benchmark phase", within)
            try:
                await asyncio.wait_for(self.changed.wait(), timeout=remaining)
            except TimeoutError:
                continue


def writes(samples: Samples) -> float:
    return metric(samples, "imexdra_controller_api_writes_total")


def controller_requests(samples: Samples, **labels: str) -> dict[str, float]:
    """Requests matching ``labels`` on the controller's resources, by ``"resource[/status]"``.

    DaemonSet status is left out: the DaemonSet controller writes it, not the domain controller;
    NetworkPolicies have no status.
    """
    counts: dict[str, float] = {}
    for r in CONTROLLER_RESOURCES:
        status = metric(samples, "apiserver_request_total", resource=r, subresource="status", **labels)
        counts[r] = metric(samples, "apiserver_request_total", resource=r, **labels) - status
        if r not in ("daemonsets", "networkpolicies"):
            counts[f"{r}/status"] = status
    return counts


def apiserver_write_counts(samples: Samples) -> dict[str, float]:
    """Writes the apiserver served on the controller's resources, by ``"VERB resource[/status]"``."""
    return {
        f"{verb} {key}": count
        for verb in WRITE_VERBS
        for key, count in controller_requests(samples, verb=verb).items()
    }


def apiserver_writes(samples: Samples) -> float:
    """All of ``apiserver_write_counts``."""
    return sum(apiserver_write_counts(samples).values())


async def burst(
    user: User, observer: Observer, controller: BenchController, prefix: str, count: int
) -> dict[str, Any]:
    names = [f"{prefix}-{i}" for i in range(count)]
    sent: dict[str, float] = {}

    async def create(name: str) -> None:
        sent[name] = time.monotonic()
        await user.create(name)

    cpu_before = controller.cpu_seconds()
    started = time.monotonic()
    await gathered(create(n) for n in names)
    created = time.monotonic() - started
    await observer.until(lambda: all(n in observer.ready for n in names), within=300)
    ready = sorted(observer.ready[n] - started for n in names)
    each = [(observer.ready[n] - sent[n]) * 1000 for n in names]
    return {
        "domains": count,
        "create_requests_s": round(created, 2),
        "all_ready_s": round(ready[-1], 2),
        "last_ready_after_last_create_s": round(ready[-1] - created, 2),
        "per_domain_create_to_ready_ms": {
            "p50": round(statistics.median(each), 1),
            "p99": round(percentile(each, 0.99), 1),
        },
        "controller_cpu_ms_per_domain": round((controller.cpu_seconds() - cpu_before) * 1000 / count, 2),
        "ready_curve_s": [round(x, 3) for x in ready],
    }


async def hold(
    user: User, observer: Observer, prefix: str, count: int, within: float = 300
) -> dict[str, Any]:
    """Create ``count`` domains and wait until all are Ready or ``within`` passed (for a memory reading).

    Not all Ready is a result, not a failure: the reading is of a controller holding ``count`` domains,
    and one that cannot make them all Ready in time (upstream's at 1000) still holds them.
    """
    names = [f"{prefix}-{i}" for i in range(count)]
    started = time.monotonic()
    await gathered(user.create(n) for n in names)
    with contextlib.suppress(TimeoutError):
        await observer.until(lambda: all(n in observer.ready for n in names), within=within)
    return {
        "ready": sum(n in observer.ready for n in names),
        "waited_s": round(time.monotonic() - started, 1),
    }


async def burst_delete(user: User, observer: Observer, names: list[str], within: float = 300) -> float:
    started = time.monotonic()
    await gathered(user.delete(n) for n in names)
    await observer.until(lambda: all(n in observer.gone for n in names), within=within)
    return round(max(observer.gone[n] for n in names) - started, 2)


def conflicts_seen(cluster: LocalCluster) -> dict[str, float]:
    """409s per resource the controller writes (``controller_requests``: DaemonSet status is not ours)."""
    counts = controller_requests(apiserver_metrics(cluster), code="409")
    return {r: counts[r] + counts.get(f"{r}/status", 0.0) for r in CONTROLLER_RESOURCES}
