"""Event aggregation: what gets created, counted, flushed, forgotten or filtered; object references."""

from typing import ClassVar

import pytest
from prometheus_client import REGISTRY

from imexdra.common.kube.connection import make_client
from imexdra.common.kube.models.core_v1 import ConfigMap, Node
from imexdra.common.kube.models.meta_v1 import ObjectMeta
from imexdra.common.kube.resource import ApiInfo, Model
from imexdra.common.machinery.events import EventAggregator, EventKey, EventRecorder, ObjectRef, and_more

REF = ObjectRef("v1", "ConfigMap", "a", "ns", "uid-a")


class FakeClock:
    """A settable monotonic clock."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def key(note: str = "it broke", *, ref: ObjectRef = REF, reason: str = "Failed") -> EventKey:
    """An event key with defaults for the fields a test does not vary."""
    return EventKey(ref, "Warning", reason, "Reconcile", note)


def aggregator(clock: FakeClock, **kwargs: float) -> EventAggregator:
    """An aggregator on a fake clock."""
    return EventAggregator(clock=clock, **kwargs)


def test_first_occurrence_creates_repeats_only_count() -> None:
    """The first occurrence asks for a create; identical repeats bump the count instead."""
    agg = aggregator(FakeClock())
    series = agg.observe(key())
    assert series is not None and series.count == 1
    assert agg.observe(key()) is None
    assert agg.observe(key()) is None
    assert series.count == 3
    assert len(agg) == 1


@pytest.mark.parametrize(
    "other",
    [key("another note"), key(reason="Other"), key(ref=ObjectRef("v1", "ConfigMap", "b", "ns", "uid-b"))],
    ids=["note", "reason", "object"],
)
def test_different_events_are_separate_series(other: EventKey) -> None:
    """A different note, reason or object is a separate Event, not a repeat."""
    agg = aggregator(FakeClock())
    assert agg.observe(key()) is not None
    assert agg.observe(other) is not None
    assert len(agg) == 2


def test_series_flushes_once_per_interval() -> None:
    """Repeats of a created Event are due for writing only after the flush interval."""
    clock = FakeClock()
    agg = aggregator(clock, flush_interval=60.0)
    series = agg.observe(key())
    assert series is not None
    series.name, series.written_count, series.last_written = "a.1", 1, clock.now
    agg.observe(key())
    clock.now += 30
    assert agg.due() == []
    clock.now += 30
    assert agg.due() == [series]
    series.written_count, series.last_written = series.count, clock.now
    assert agg.due() == []  # nothing new to write


def test_uncreated_series_is_never_due() -> None:
    """Repeats of an Event whose create has not happened yet wait for it."""
    clock = FakeClock()
    agg = aggregator(clock, flush_interval=1.0)
    agg.observe(key())
    agg.observe(key())
    clock.now += 100
    assert agg.due() == []


def test_idle_series_is_flushed_then_forgotten() -> None:
    """A series idle for the TTL is due one last time, then forgotten so a repeat starts a new Event."""
    clock = FakeClock()
    agg = aggregator(clock, flush_interval=1000.0, series_ttl=360.0)
    series = agg.observe(key())
    assert series is not None
    series.name, series.written_count, series.last_written = "a.1", 1, clock.now
    agg.observe(key())
    clock.now += 360
    assert agg.due() == [series]  # expiring: flushed despite the long interval
    agg.expire()
    assert len(agg) == 0
    assert agg.observe(key()) is not None


def test_spam_filter_caps_new_events_per_object() -> None:
    """Past the burst, an object may start one new Event per refill interval; others are dropped."""
    clock = FakeClock()
    agg = aggregator(clock, burst=3, refill_interval=300.0)
    before = REGISTRY.get_sample_value("imexdra_events_dropped_total", {"reason": "spam_filter"}) or 0
    created = [agg.observe(key(f"note {i}")) is not None for i in range(5)]
    assert created == [True, True, True, False, False]
    other = ObjectRef("v1", "ConfigMap", "b", "ns", "uid-b")
    assert agg.observe(key(ref=other)) is not None  # budgets are per object
    clock.now += 300
    assert agg.observe(key("note 9")) is not None
    assert agg.observe(key("note 10")) is None
    after = REGISTRY.get_sample_value("imexdra_events_dropped_total", {"reason": "spam_filter"})
    assert after == before + 3


def test_discard_forgets_only_that_series() -> None:
    """Discarding a dropped series lets the next occurrence start a new one."""
    agg = aggregator(FakeClock())
    series = agg.observe(key())
    assert series is not None
    agg.discard(series)
    assert len(agg) == 0
    assert agg.observe(key()) is not None


def test_repeats_of_existing_series_bypass_the_spam_filter() -> None:
    """Counting a repeat costs no budget: a tight loop of one failure is one Event with a big count."""
    agg = aggregator(FakeClock(), burst=1)
    series = agg.observe(key())
    for _ in range(100):
        agg.observe(key())
    assert series is not None and series.count == 101


def test_object_ref_of_builtin_and_cluster_scoped() -> None:
    """References take kind and version from the resource class; cluster-scoped ones have no namespace."""
    cm = ConfigMap(metadata=ObjectMeta(name="a", namespace="ns", uid="u1"))
    assert ObjectRef.of(cm) == ObjectRef("v1", "ConfigMap", "a", "ns", "u1")
    node = Node(metadata=ObjectMeta(name="n1", uid="u2"))
    assert ObjectRef.of(node) == ObjectRef("v1", "Node", "n1", None, "u2")


def test_object_ref_of_custom_resource() -> None:
    """Custom resources (a model with its own ApiInfo) get their group version."""

    class Widget(Model, kw_only=True):
        _api_info: ClassVar[ApiInfo] = ApiInfo(
            group="example.com", version="v1", kind="Widget", plural="widgets", namespaced=True
        )
        metadata: ObjectMeta | None = None

    obj = Widget(metadata=ObjectMeta(name="w", namespace="ns", uid="u3"))
    assert ObjectRef.of(obj) == ObjectRef("example.com/v1", "Widget", "w", "ns", "u3")


def test_object_ref_needs_a_named_resource() -> None:
    """An unnamed object cannot be referenced."""
    with pytest.raises(ValueError, match="named"):
        ObjectRef.of(ConfigMap(metadata=ObjectMeta(namespace="ns")))


async def test_record_never_blocks_and_drops_when_queue_full(tmp_path) -> None:
    """With nobody draining, creates beyond the queue size are dropped and counted, not awaited."""
    kubeconfig = tmp_path / "kc"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\n"
        "current-context: x\n"
    )
    client = make_client(field_manager="test", kubeconfig=kubeconfig)
    recorder = EventRecorder(client, controller="test/controller", instance="pod-1", queue_size=2)
    before = REGISTRY.get_sample_value("imexdra_events_dropped_total", {"reason": "queue_full"}) or 0
    for i in range(4):
        recorder.record(REF, type="Warning", reason="Failed", note=f"n{i}", action="Reconcile")
    recorder.record(REF, type="Warning", reason="Failed", note="n0", action="Reconcile")  # queued: a repeat
    recorder.record(REF, type="Warning", reason="Failed", note="n3", action="Reconcile")  # dropped: retried
    after = REGISTRY.get_sample_value("imexdra_events_dropped_total", {"reason": "queue_full"})
    assert after == before + 3
    assert len(recorder.aggregator) == 2  # dropped series are forgotten, so a later occurrence can retry
    client.close()


@pytest.mark.parametrize(
    ("shown", "total", "text"),
    [((), 0, ""), (("a", "b"), 2, "a, b"), (("a", "b"), 12, "a, b and 10 more")],
)
def test_and_more_names_the_first_and_counts_the_rest(shown: tuple[str, ...], total: int, text: str) -> None:
    """The names shown, then how many were left out (nothing when none was)."""
    assert and_more(shown, total) == text
