"""The shared controller machinery against the real kube-apiserver.

Aspects covered: the informer's list+watch delivers adds, updates and deletes of ConfigMaps and keeps
its indexes; bookmarks advance the resume point without events; a watch that resumes from a point the
server no longer keeps (410 Gone) relists and emits synthetic deletes; informer → work queue → workers
wiring; two leader electors on one Lease give exactly one leader, fail over on release, on expiry of a
dead holder's Lease, and a leader whose Lease is taken over stops; the event recorder creates
``events.k8s.io/v1`` Events that ``kubectl describe`` shows, aggregating repeats into one series; the
client factory counts API requests and enforces its QPS limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import secrets
from collections.abc import AsyncIterator, Iterator

import msgspec
import pytest
from prometheus_client import REGISTRY

from imexdra.common.kube.api import PatchType
from imexdra.common.kube.client import ApiStatusError, load_config, microtime
from imexdra.common.kube.connection import make_client
from imexdra.common.kube.kubeclient import KubeClient
from imexdra.common.kube.models.coordination_v1 import Lease, LeaseSpec
from imexdra.common.kube.models.core_v1 import ConfigMap, Namespace
from imexdra.common.kube.models.core_v1 import Event as CoreEvent
from imexdra.common.kube.models.meta_v1 import ObjectMeta
from imexdra.common.kube.restmetrics import server_host
from imexdra.common.machinery.events import EventAggregator, EventRecorder
from imexdra.common.machinery.informer import EventHandler, Informer, enqueue
from imexdra.common.machinery.leaderelection import LeaderElectionConfig, LeaderElector, LeadershipLostError
from imexdra.common.machinery.store import index_by_label
from imexdra.common.machinery.workqueue import WorkQueue, run_workers
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.support.waiting import eventually, stays_true

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def namespace(cluster: LocalCluster) -> Iterator[str]:
    """A namespace of this module's own, deleted afterwards, with siblings ``-churn`` and ``-gone``."""
    name = f"common-{secrets.token_hex(3)}"
    names = [name, f"{name}-churn", f"{name}-gone"]
    for each in names:
        cluster.kubectl("create", "namespace", each)
    yield name
    cluster.kubectl("delete", "namespace", *names, "--wait=false")


@pytest.fixture(scope="module")
async def client(cluster: LocalCluster) -> AsyncIterator[KubeClient]:
    """A client built by the project's own factory from the admin kubeconfig."""
    built = make_client(field_manager="imexdra-common-tests", kubeconfig=cluster.kubeconfig)
    yield built
    built.close()


class Recorder:
    """An event handler that records what it was told, as ("add"|"update"|"delete", name)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def handler(self) -> EventHandler[ConfigMap]:
        return EventHandler(
            on_add=lambda obj: self.seen.append(("add", obj.metadata.name)),
            on_update=lambda _old, new: self.seen.append(("update", new.metadata.name)),
            on_delete=lambda obj: self.seen.append(("delete", obj.metadata.name)),
        )


@contextlib.asynccontextmanager
async def running(informer: Informer[ConfigMap]) -> AsyncIterator[Informer[ConfigMap]]:
    """Run ``informer`` for the duration of the block, synced on entry."""
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.wait_for_sync(), 30)
        yield informer
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def cm(name: str, namespace: str, **labels: str) -> ConfigMap:
    """A ConfigMap to create."""
    return ConfigMap(
        metadata=ObjectMeta(name=name, namespace=namespace, labels=labels or None), data={"v": "1"}
    )


async def test_informer_sees_adds_updates_deletes(client: KubeClient, namespace: str) -> None:
    """Objects listed at start and every later change reach the handlers and the indexed store."""
    await client.create(cm("pre", namespace, team="x"))
    informer = Informer(client, ConfigMap, namespace=namespace, indexers={"team": index_by_label("team")})
    recorder = Recorder()
    informer.add_handler(recorder.handler())
    async with running(informer):
        assert informer.has_synced()
        assert ("add", "pre") in recorder.seen
        await client.create(cm("a", namespace, team="x"))
        await client.patch(ConfigMap, "a", {"metadata": {"labels": {"team": "y"}}}, namespace=namespace)
        await client.delete(ConfigMap, "pre", namespace=namespace)
        await eventually("the delete to arrive", lambda: ("delete", "pre") in recorder.seen, within=10)
    events = [e for e in recorder.seen if e[1] in ("a", "pre")]
    assert events == [("add", "pre"), ("add", "a"), ("update", "a"), ("delete", "pre")]
    assert [o.metadata.name for o in informer.store.by_index("team", "y")] == ["a"]
    assert informer.store.index_keys("team", "x") == []
    assert informer.store.get(f"{namespace}/pre") is None


async def test_bookmarks_advance_resume_point(client: KubeClient, namespace: str) -> None:
    """With nothing it selects changing, the informer's resume point still moves via bookmarks."""
    # The selector matches nothing, so no event (not even kube-root-ca.crt appearing) can move it.
    informer = Informer(
        client, ConfigMap, namespace=namespace, label_selector="matches=nothing", watch_timeout=3
    )
    recorder = Recorder()
    informer.add_handler(recorder.handler())
    bookmarks = {"resource": "ConfigMap", "type": "BOOKMARK"}
    before = REGISTRY.get_sample_value("imexdra_reflector_watch_events_total", bookmarks) or 0.0
    async with running(informer):
        synced_at = int(informer.resource_version or 0)
        recorder.seen.clear()
        for i in range(3):  # changes elsewhere move the server's resourceVersion on
            await client.create(cm(f"elsewhere-{i}", f"{namespace}-churn"))
        await eventually(
            "a bookmark beyond the churn", lambda: int(informer.resource_version or 0) > synced_at, within=20
        )
    after = REGISTRY.get_sample_value("imexdra_reflector_watch_events_total", bookmarks)
    assert after is not None and after > before
    assert recorder.seen == []  # bookmarks are not events


async def test_informer_feeds_workers(client: KubeClient, namespace: str) -> None:
    """The standard wiring: informer events enqueue keys, workers reconcile them from the cache."""
    informer = Informer(client, ConfigMap, namespace=namespace, label_selector="wired=yes")
    queue: WorkQueue[str] = WorkQueue("test-wiring")
    informer.add_handler(enqueue(queue))
    reconciled: dict[str, str | None] = {}

    async def reconcile(key: str) -> None:
        obj = informer.store.get(key)
        reconciled[key] = obj.data.get("v") if obj is not None and obj.data else None

    workers = asyncio.create_task(run_workers(queue, reconcile, workers=2))
    try:
        async with running(informer):
            await client.create(cm("w1", namespace, wired="yes"))
            await client.create(cm("ignored", namespace, wired="no"))
            await client.patch(
                ConfigMap, "w1", {"data": {"v": "2"}}, namespace=namespace, patch_type=PatchType.MERGE
            )
            await eventually("the update", lambda: reconciled.get(f"{namespace}/w1") == "2", within=10)
            await client.delete(ConfigMap, "w1", namespace=namespace)
            await eventually("the delete", lambda: reconciled.get(f"{namespace}/w1", "") is None, within=10)
    finally:
        queue.shut_down()
        await asyncio.wait_for(workers, 5)
    assert f"{namespace}/ignored" not in reconciled


def election(namespace: str, name: str, identity: str, *, lease_duration: float = 3) -> LeaderElectionConfig:
    """Fast timings so failover tests take seconds, same ratios as the defaults unless a test needs more."""
    return LeaderElectionConfig(
        name=name,
        namespace=namespace,
        identity=identity,
        lease_duration=lease_duration,
        renew_deadline=lease_duration * 2 / 3,
        retry_period=0.5,
    )


async def lease_holder(client: KubeClient, namespace: str, name: str) -> str | None:
    """The Lease's current holder as stored in the API server."""
    lease = await client.get(Lease, name, namespace=namespace)
    return lease.spec.holderIdentity if lease.spec else None


async def test_one_leader_and_failover_on_release(client: KubeClient, namespace: str) -> None:
    """Two candidates: exactly one leads; when its work ends it releases and the other takes over at once.

    The Lease lasts 30 s, so a standby that had to wait it out would take 30 s from the leader's last
    renewal; taking over well inside that shows the release did it, with a margin no loaded CI
    machine's API latency eats (a 3 s Lease here once measured a 4.3 s takeover on a busy runner).
    """
    lease_duration = 30.0
    observed: dict[str, list[str]] = {"cand-0": [], "cand-1": []}
    electors = [
        LeaderElector(
            client,
            election(namespace, "release", f"cand-{i}", lease_duration=lease_duration),
            on_new_leader=observed[f"cand-{i}"].append,
        )
        for i in range(2)
    ]
    finish = {e.config.identity: asyncio.Event() for e in electors}

    async def work_of(elector: LeaderElector) -> str:
        await finish[elector.config.identity].wait()
        return elector.config.identity

    tasks = [asyncio.create_task(e.run(lambda e=e: work_of(e))) for e in electors]
    try:
        await eventually("a leader", lambda: any(e.is_leader for e in electors), within=10)
        await stays_true(  # several renew periods (retry_period 0.5 s)
            "exactly one leader", lambda: sum(e.is_leader for e in electors) == 1, for_seconds=2, interval=0.1
        )
        leaders = [e for e in electors if e.is_leader]
        first = leaders[0]
        standby = next(e for e in electors if e is not first)
        assert await lease_holder(client, namespace, "release") == first.config.identity
        finish[first.config.identity].set()
        assert await asyncio.wait_for(tasks[electors.index(first)], 10) == first.config.identity
        # A standby waiting the Lease out would need the whole lease_duration after the last renewal.
        await asyncio.wait_for(standby.started_leading.wait(), lease_duration * 2 / 3)
        assert await lease_holder(client, namespace, "release") == standby.config.identity
        lease = await client.get(Lease, "release", namespace=namespace)
        assert lease.spec is not None and lease.spec.leaseTransitions == 1
        assert first.stopped_leading.is_set() and not first.is_leader
        assert observed[standby.config.identity] == [first.config.identity, standby.config.identity]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_failover_after_dead_leader_lease_expires(client: KubeClient, namespace: str) -> None:
    """A Lease held by a crashed process is taken over only after its duration passes unrenewed."""
    now = microtime()
    spec = LeaseSpec(holderIdentity="crashed", leaseDurationSeconds=3, acquireTime=now, renewTime=now)
    await client.create(Lease(metadata=ObjectMeta(name="expiry", namespace=namespace), spec=spec))
    elector = LeaderElector(client, election(namespace, "expiry", "successor"))
    loop = asyncio.get_running_loop()
    started = loop.time()
    task = asyncio.create_task(elector.run(asyncio.Event().wait))
    try:
        await asyncio.wait_for(elector.started_leading.wait(), 10)
        assert loop.time() - started >= 3  # it waited out the dead holder's lease
        assert await lease_holder(client, namespace, "expiry") == "successor"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_leader_stops_when_lease_is_taken_over(client: KubeClient, namespace: str) -> None:
    """If someone else writes the Lease, the leader's renewal conflicts and its work is cancelled."""
    elector = LeaderElector(client, election(namespace, "takeover", "victim"))
    work_cancelled = asyncio.Event()

    async def work() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            work_cancelled.set()
            raise

    task = asyncio.create_task(elector.run(work))
    await asyncio.wait_for(elector.started_leading.wait(), 10)
    lease = await client.get(Lease, "takeover", namespace=namespace)
    assert lease.spec is not None
    stolen = msgspec.structs.replace(lease.spec, holderIdentity="usurper", renewTime=microtime())
    await client.replace(msgspec.structs.replace(lease, spec=stolen))
    with pytest.raises(LeadershipLostError):
        await asyncio.wait_for(task, 10)
    assert work_cancelled.is_set()
    assert elector.stopped_leading.is_set() and not elector.is_leader
    assert await lease_holder(client, namespace, "takeover") == "usurper"  # not "released" over the winner


async def test_event_recorder_creates_and_aggregates(
    client: KubeClient, namespace: str, cluster: LocalCluster
) -> None:
    """Repeats become one Event with a series count; kubectl describe shows it with its source."""
    target = await client.create(cm("evented", namespace))
    recorder = EventRecorder(
        client,
        controller="compute-domain.nvidia.com/test",
        instance="test-pod-0",
        aggregator=EventAggregator(flush_interval=0.5),
    )
    runner = asyncio.create_task(recorder.run(tick=0.1))
    try:
        recorder.record(target, type="Normal", reason="Reconciled", note="all good", action="Reconcile")
        for _ in range(3):
            recorder.record(target, type="Warning", reason="SyncFailed", note="it broke", action="Reconcile")
            await asyncio.sleep(0.2)  # repeats spread over the recorder's ticks

        async def warnings() -> list[CoreEvent]:
            fields = {"involvedObject.uid": target.metadata.uid, "reason": "SyncFailed"}
            found = [e async for e in client.list(CoreEvent, namespace=namespace, fields=fields)]
            return [e for e in found if e.series is not None and e.series.count == 3]

        (event,) = await eventually("the series count to reach 3", warnings, within=10)
        assert (event.type, event.message, event.reportingComponent) == (
            "Warning",
            "it broke",
            "compute-domain.nvidia.com/test",
        )
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
    recorder.record(target, type="Warning", reason="SyncFailed", note="it broke", action="Reconcile")
    await eventually(
        "the repeat due (flush interval passed)", recorder.aggregator.due, within=5, interval=0.05
    )
    await recorder.flush()  # what a main does on shutdown: counts seen since the last write land too
    described = cluster.kubectl("describe", "configmap", "evented", "-n", namespace).stdout
    assert "SyncFailed" in described and "(x4 over" in described
    assert "Reconciled" in described and "compute-domain.nvidia.com/test" in described


async def test_client_counts_requests_and_enforces_qps(cluster: LocalCluster, namespace: str) -> None:
    """The factory's client counts requests with client-go's labels and keeps to its QPS after the burst."""
    throttled = make_client(field_manager="qps-test", kubeconfig=cluster.kubeconfig, qps=4, burst=1)
    host = server_host(load_config(cluster.kubeconfig).cluster.server)
    labels = {"code": "200", "method": "GET", "host": host}
    before = REGISTRY.get_sample_value("rest_client_requests_total", labels) or 0.0
    waits = {"verb": "GET", "host": host}
    waited_before = REGISTRY.get_sample_value("rest_client_rate_limiter_duration_seconds_sum", waits) or 0.0
    loop = asyncio.get_running_loop()
    started = loop.time()
    try:
        for _ in range(5):
            await throttled.get(Namespace, namespace)
    finally:
        throttled.close()
    assert loop.time() - started >= 0.9  # 1 free, then 4 more at 4 per second
    assert REGISTRY.get_sample_value("rest_client_requests_total", labels) == before + 5
    waited = (
        REGISTRY.get_sample_value("rest_client_rate_limiter_duration_seconds_sum", waits) or 0.0
    ) - waited_before
    assert waited >= 0.7  # the four throttled requests waited about 0.25 s each in the bucket


async def watch_window_excludes(client: KubeClient, namespace: str, resource_version: str) -> bool:
    """Ask the server whether a ConfigMap watch from ``resource_version`` is expired (410)."""
    try:
        async with client.watch(
            ConfigMap,
            namespace=namespace,
            resource_version=resource_version,
            timeout_seconds=1,
            bookmarks=False,
        ) as events:
            async for event in events:
                return event.type == "ERROR" and b'"code":410' in bytes(event.object)
    except ApiStatusError as error:
        return error.code == 410
    return False


async def age_out(client: KubeClient, resource_version: str, *, churn: str, within: float = 180.0) -> None:
    """Write ConfigMaps until the server's watch window no longer reaches back to ``resource_version``.

    This pushes old events out of the watch cache for real instead of faking the server's answer. The
    cache evicts nothing younger than 75 s, and writes while its oldest events are that young only make
    it grow; so first wait until the events of the API server's start are older than that, then write.
    """
    kube_system = await client.get(Namespace, "kube-system")
    assert kube_system.metadata is not None and kube_system.metadata.creationTimestamp is not None
    stale_at = kube_system.metadata.creationTimestamp + dt.timedelta(seconds=80)
    # The condition is the server's age itself: sleep until then, no polling can make it sooner.
    await asyncio.sleep(max(0.0, (stale_at - dt.datetime.now(dt.UTC)).total_seconds()))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    batch = 0
    while not await watch_window_excludes(client, churn, resource_version):
        if loop.time() > deadline:
            pytest.fail(f"watch window still reaches resourceVersion {resource_version} after {within}s")
        await asyncio.gather(*(client.create(cm(f"churn-{batch}-{i}", churn)) for i in range(50)))
        batch += 1


async def test_expired_watch_relists_with_synthetic_deletes(client: KubeClient, namespace: str) -> None:
    """A watch resumed from outside the server's window gets 410; the relist reports what vanished."""
    ns = f"{namespace}-gone"
    for name in ("keep", "doomed"):
        await client.create(cm(name, ns, test="gone"))
    informer = Informer(client, ConfigMap, namespace=ns, label_selector="test=gone")
    recorder = Recorder()
    informer.add_handler(recorder.handler())
    async with running(informer):
        pass  # synced, then stopped: like a long network partition, it misses what follows
    await client.delete(ConfigMap, "doomed", namespace=ns)
    await client.create(cm("born", ns, test="gone"))
    await age_out(client, "1", churn=f"{namespace}-churn")
    # Rewinding the resume point to the oldest possible one stands in for a partition longer than the
    # server's window; aging the informer's real resume point out would take more than 75 s of waiting.
    informer._resource_version = "1"
    recorder.seen.clear()
    expired = {"resource": "ConfigMap", "reason": "expired"}
    relists = REGISTRY.get_sample_value("imexdra_reflector_lists_total", expired) or 0.0
    async with running(informer):
        await eventually("the relist", lambda: ("add", "born") in recorder.seen, within=30)
    assert ("delete", "doomed") in recorder.seen
    assert ("add", "keep") not in recorder.seen  # unchanged objects are not re-announced
    assert sorted(informer.store.keys()) == [f"{ns}/born", f"{ns}/keep"]
    assert REGISTRY.get_sample_value("imexdra_reflector_lists_total", expired) == relists + 1
