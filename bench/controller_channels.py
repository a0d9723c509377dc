"""The controller benchmark's channel-isolation phase: a burst of host-managed domains, each its own channel.

Issue 17's figure: ``--channel-burst`` (default 2000) host-managed ComputeDomains created at once by 50
concurrent clients against our controller run with ``--imex-isolation=channel`` and the
``HostManagedIMEX`` gate. The controller gives every domain the lowest free IMEX channel, records it
in ``status.channel`` and only then renders the template and marks the domain Ready
(docs/channel-isolation.md §4), so Ready is the end of the allocation. Measured: time from the first
create to the last Ready (and each domain's create → Ready), the channels the watch saw on the Ready
status (all present and pairwise distinct, or the run fails after writing its results), API writes
per domain (the controller's own counter, and the apiserver's write count on the controller's
resources less the user's create), the apiserver's 409s on those resources and the controller's own
409s during the phase, the controller's RSS with the domains live, and the time until all are gone
after a burst delete (its writes per domain, less the user's delete).

The controller authenticates as admin, as in every phase; with the chart's RBAC it would also need
list/watch on ResourceClaims cluster-wide (``imexdra.controller.rbac.cluster_rules``). The pool is
the default 2048 channels (``--imex-channel-count``), so at most 2047 domains fit. The domains of the
earlier phases are all gone by then: channel isolation refuses to run next to live domains made under
``domain`` isolation (docs/channel-isolation.md §9).
"""

from __future__ import annotations

import argparse
import functools
import operator
from collections import Counter
from typing import Any

from benchlib import (
    OUR_CONTROLLER_COMMAND,
    BenchController,
)
from controller_api import (
    CONTROLLER_RESOURCES,
    Observer,
    User,
    apiserver_writes,
    burst,
    burst_delete,
    conflicts_seen,
    writes,
)

from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.promtext import Samples, apiserver_metrics, metric

#: The default pool (``--imex-channel-count`` 2048) less channel 0, which is never handed out.
POOL = 2047


def channel_check(names: list[str], observer: Observer) -> dict[str, Any]:
    """Whether every domain was Ready with a channel of its own; the duplicates if not."""
    channels = [observer.channels.get(name) for name in names]
    numbers = [c for c in channels if c is not None]
    counts = Counter(numbers)
    duplicates = {str(number): n for number, n in sorted(counts.items()) if n > 1}
    return {
        "unique": len(numbers) == len(names) and not duplicates,
        "without_channel": len(names) - len(numbers),
        "distinct": len(counts),
        "lowest": min(numbers, default=None),
        "highest": max(numbers, default=None),
        "duplicates": duplicates,
    }


async def _warm_up(user: User, observer: Observer, name: str) -> None:
    """One untimed domain, created until Ready and deleted until gone: the caches are synced after it."""
    await user.create(name)
    await observer.until(functools.partial(operator.contains, observer.ready, name), within=60)
    await user.delete(name)
    await observer.until(functools.partial(operator.contains, observer.gone, name), within=60)


def mean_latencies_ms(before: Samples, after: Samples, name: str, keys: tuple[str, ...]) -> dict[str, float]:
    """Mean latency (ms) of histogram ``name`` between two scrapes, by the labels ``keys``.

    Keys are the label values joined by ``/``; label sets without requests in between are left out.
    """
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    for suffix, into in (("_sum", sums), ("_count", counts)):
        for (sample, labels), value in after.items():
            if sample != name + suffix:
                continue
            key = "/".join(dict(labels).get(k, "") for k in keys)
            into[key] = into.get(key, 0.0) + value - before.get((sample, labels), 0.0)
    return {k: round(1000 * sums[k] / n, 2) for k, n in sorted(counts.items()) if n > 0}


def _conflicts_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {r: after[r] - before[r] for r in CONTROLLER_RESOURCES}


async def burst_channel_isolation(
    cluster: LocalCluster, args: argparse.Namespace, user: User, observer: Observer, label: str
) -> dict[str, Any]:
    """The phase (see the module docstring); ``label`` prefixes the domains' names."""
    count = args.channel_burst
    if count > POOL:
        raise ValueError(f"--channel-burst {count}: the default pool holds {POOL} channel-isolated domains")
    assert cluster.run_dir is not None
    controller = BenchController(
        cluster.kubeconfig,
        cluster.run_dir / f"{label}-channel-isolation.log",
        host_managed=True,
        isolation="channel",
        qps=args.qps,
        burst=args.burst_limit,
        command=OUR_CONTROLLER_COMMAND,
    )
    controller.start()
    try:
        await controller.wait_ready()
        await _warm_up(user, observer, f"{label}-channel-warmup")
        prefix = f"{label}-channel"
        names = [f"{prefix}-{i}" for i in range(count)]
        own_before = controller.metrics()
        scrape_before = apiserver_metrics(cluster)
        apiserver_before = apiserver_writes(scrape_before)
        conflicts_before = conflicts_seen(cluster)
        result = await burst(user, observer, controller, prefix, count)
        own_ready = controller.metrics()
        scrape_ready = apiserver_metrics(cluster)
        apiserver_ready = apiserver_writes(scrape_ready)
        # Where the time goes: the apiserver's own handling of each request kind, next to what the
        # controller's client waited for it (its rate limiter included), create → last Ready.
        result["apiserver_mean_latency_ms"] = {
            k: v
            for k, v in mean_latencies_ms(
                scrape_before,
                scrape_ready,
                "apiserver_request_duration_seconds",
                ("verb", "resource", "subresource"),
            ).items()
            if k.split("/")[1] in ("computedomains", "resourceclaimtemplates")
        }
        result["controller_mean_latency_ms"] = mean_latencies_ms(
            own_before, own_ready, "rest_client_request_duration_seconds", ("verb",)
        )
        result["rss_mib_with_domains"] = controller.rss_mib()
        result["channels"] = channel_check(names, observer)
        result["api_writes_per_domain"] = round((writes(own_ready) - writes(own_before)) / count, 2)
        # Any implementation: the apiserver's count from the first create to the last Ready, less the
        # user's create.
        result["apiserver_writes_per_domain"] = round((apiserver_ready - apiserver_before) / count - 1, 2)
        result["delete_all_gone_s"] = await burst_delete(user, observer, names)
        own_gone = controller.metrics()
        apiserver_gone = apiserver_writes(apiserver_metrics(cluster))
        result["apiserver_writes_per_domain_delete"] = round(
            (apiserver_gone - apiserver_ready) / count - 1, 2
        )
        result["api_writes_per_domain_delete"] = round((writes(own_gone) - writes(own_ready)) / count, 2)
        result["conflicts"] = {
            "apiserver_409_by_resource": _conflicts_delta(conflicts_before, conflicts_seen(cluster)),
            "controller_409": metric(own_gone, "rest_client_requests_total", code="409")
            - metric(own_before, "rest_client_requests_total", code="409"),
        }
        return result
    finally:
        controller.stop()
