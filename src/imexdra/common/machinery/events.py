"""Kubernetes Events with aggregation, so that a failing loop tells users once instead of storming the API.

We write ``events.k8s.io/v1`` Events: the current API, with ``series`` built for counting repeats and
``reportingController``/``reportingInstance`` naming who spoke. The API server stores one Event type and
serves it as ``core/v1`` too, which is what ``kubectl describe`` and ``kubectl get events`` read: our
Events show there with reason, note, source (the reporting controller) and "xN over <age>".

Bounded API cost, whatever the caller does:

- the first occurrence of an Event (same object, type, reason, action and note) is created at once;
  repeats only bump an in-memory count, written as ``series`` at most once per ``flush_interval``;
- a series idle for ``series_ttl`` is flushed one last time and forgotten (a later repeat starts anew);
- each object may start at most ``burst`` new Events, then one per ``refill_interval`` (the spam filter
  of client-go's legacy recorder): a loop that varies its note cannot flood either;
- recording never blocks and never raises: writes go through a bounded queue drained by :meth:`run`;
  when it is full, or an API write fails, the Event is dropped and counted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

import structlog

from imexdra.common.kube.api import KubeApi, PatchType
from imexdra.common.kube.client import ApiStatusError, is_not_found, kube_errors, microtime
from imexdra.common.kube.models.core_v1 import ObjectReference
from imexdra.common.kube.models.events_v1 import Event, EventSeries
from imexdra.common.kube.models.meta_v1 import ObjectMeta
from imexdra.common.kube.resource import api_info, is_resource
from imexdra.common.machinery.store import KubeObject
from imexdra.common.observability.metrics import EVENTS_DROPPED
from imexdra.common.pacing.ratelimit import TokenBucket

EventType = Literal["Normal", "Warning"]

_NOTE_LIMIT = 1024  # the API rejects longer notes
_log = structlog.get_logger(__name__)


def and_more(shown: Sequence[str], total: int) -> str:
    """``shown`` joined by commas, then " and N more" for the ``total - len(shown)`` left out.

    How an Event note or a message names the first of many objects.
    """
    rest = total - len(shown)
    return ", ".join(shown) + (f" and {rest} more" if rest > 0 else "")


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """The object an Event is about."""

    api_version: str
    kind: str
    name: str
    namespace: str | None = None
    uid: str | None = None

    @classmethod
    def of(cls, obj: KubeObject) -> ObjectRef:
        """Reference an object of a kind (kind and version come from its class)."""
        meta = obj.metadata
        if not is_resource(obj) or meta is None or not meta.name:
            raise ValueError("events can only be recorded about named Kubernetes objects")
        info = api_info(obj)
        return cls(info.api_version, info.kind, meta.name, meta.namespace or None, meta.uid)


@dataclass(frozen=True, slots=True)
class EventKey:
    """What makes two Events "the same" for aggregation."""

    regarding: ObjectRef
    type: EventType
    reason: str
    action: str
    note: str


@dataclass(slots=True)
class Series:
    """One aggregated Event: how often it happened and what of that the API server knows."""

    key: EventKey
    first_seen: float
    last_seen: float
    count: int = 1
    written_count: int = 0
    last_written: float = 0.0
    name: str | None = None  # the Event object's name, once created


@dataclass(slots=True)
class EventAggregator:
    """The pure bookkeeping behind :class:`EventRecorder`; times are seconds on ``clock``."""

    flush_interval: float = 60.0
    series_ttl: float = 360.0
    burst: int = 25
    refill_interval: float = 300.0
    clock: Callable[[], float] = time.monotonic
    _series: dict[EventKey, Series] = field(default_factory=dict)
    _buckets: dict[ObjectRef, TokenBucket] = field(default_factory=dict)

    def observe(self, key: EventKey) -> Series | None:
        """Count one occurrence; return a new series to create, or None (counted, or spam-filtered)."""
        now = self.clock()
        series = self._series.get(key)
        if series is not None:
            series.count += 1
            series.last_seen = now
            return None
        bucket = self._buckets.get(key.regarding)
        if bucket is None:
            bucket = TokenBucket(rate=1.0 / self.refill_interval, burst=self.burst, clock=self.clock)
            self._buckets[key.regarding] = bucket
        if not bucket.try_take():
            EVENTS_DROPPED.labels(reason="spam_filter").inc()
            return None
        series = Series(key=key, first_seen=now, last_seen=now)
        self._series[key] = series
        return series

    def due(self) -> list[Series]:
        """Created series with unwritten repeats whose flush interval passed (or that are expiring)."""
        now = self.clock()
        return [
            s
            for s in self._series.values()
            if s.name is not None
            and s.count > s.written_count
            and (now - s.last_written >= self.flush_interval or now - s.last_seen >= self.series_ttl)
        ]

    def expire(self) -> None:
        """Forget series idle for ``series_ttl``, and the spam budget of objects left without any."""
        now = self.clock()
        for key in [key for key, s in self._series.items() if now - s.last_seen >= self.series_ttl]:
            del self._series[key]
        active = {key.regarding for key in self._series}
        for ref in [ref for ref in self._buckets if ref not in active]:
            del self._buckets[ref]

    def discard(self, series: Series) -> None:
        """Forget a series whose create was dropped, so a later occurrence may try again."""
        if self._series.get(series.key) is series:
            del self._series[series.key]

    def __len__(self) -> int:
        return len(self._series)


class EventRecorder:
    """Records Events about objects for one reporting controller instance.

    Args:
        client: the component's API client.
        controller: ``reportingController``, e.g. ``compute-domain.nvidia.com/controller``.
        instance: ``reportingInstance``, e.g. the pod name (at most 128 characters).
        aggregator: the aggregation policy (defaults as described in the module docstring).
        queue_size: creates waiting for :meth:`run`; more are dropped.

    """

    def __init__(
        self,
        client: KubeApi,
        *,
        controller: str,
        instance: str,
        aggregator: EventAggregator | None = None,
        queue_size: int = 1000,
    ) -> None:
        self.aggregator = aggregator if aggregator is not None else EventAggregator()
        self._client = client
        self._controller = controller
        self._instance = instance[:128]
        self._pending: asyncio.Queue[Series] = asyncio.Queue(maxsize=queue_size)

    def record(
        self, regarding: KubeObject | ObjectRef, *, type: EventType, reason: str, note: str, action: str
    ) -> None:
        """Record that ``action`` happened to ``regarding`` because of ``reason``; never blocks.

        ``reason`` is a short UpperCamelCase machine-readable word (``PrepareFailed``); ``note`` the
        human-readable detail; ``action`` what was done or attempted (``Prepare``, ``Reconcile``).
        """
        ref = regarding if isinstance(regarding, ObjectRef) else ObjectRef.of(regarding)
        key = EventKey(ref, type, reason, action, note[:_NOTE_LIMIT])
        series = self.aggregator.observe(key)
        if series is None:
            return
        try:
            self._pending.put_nowait(series)
        except asyncio.QueueFull:
            self.aggregator.discard(series)
            EVENTS_DROPPED.labels(reason="queue_full").inc()

    async def run(self, *, tick: float = 1.0) -> None:
        """Write queued Events and due series updates until cancelled."""
        while True:
            try:
                async with asyncio.timeout(tick):
                    series = await self._pending.get()
                await self._create(series)
            except TimeoutError:
                pass
            for due in self.aggregator.due():
                await self._write_series(due)
            self.aggregator.expire()

    async def flush(self) -> None:
        """Write everything queued or counted so far (for graceful shutdown and tests)."""
        while not self._pending.empty():
            await self._create(self._pending.get_nowait())
        for series in self.aggregator.due():
            await self._write_series(series)

    def _event(self, series: Series) -> Event:
        key = series.key
        ref = key.regarding
        now = microtime()
        return Event(
            metadata=ObjectMeta(
                # Unique like client-go's "<name>.<hex nanoseconds>", so re-creation never collides.
                name=f"{ref.name}.{time.time_ns():x}",
                namespace=ref.namespace or "default",
            ),
            eventTime=now,
            regarding=ObjectReference(
                apiVersion=ref.api_version, kind=ref.kind, name=ref.name, namespace=ref.namespace, uid=ref.uid
            ),
            type=key.type,
            reason=key.reason,
            action=key.action,
            note=key.note,
            reportingController=self._controller,
            reportingInstance=self._instance,
            series=EventSeries(count=series.count, lastObservedTime=now) if series.count > 1 else None,
        )

    async def _create(self, series: Series) -> None:
        event = self._event(series)
        count = series.count
        try:
            with kube_errors(f"create event {series.key.reason}"):
                await self._client.create(event)
        except ApiStatusError as error:
            _log.info("Event dropped", reason=series.key.reason, error=str(error))
            EVENTS_DROPPED.labels(reason="api_error").inc()
            self.aggregator.discard(series)
            return
        series.name = event.metadata.name if event.metadata else None
        series.written_count = count
        series.last_written = self.aggregator.clock()

    async def _write_series(self, series: Series) -> None:
        assert series.name is not None, "only created series are due"
        count = series.count
        patch = {"series": {"count": count, "lastObservedTime": microtime()}}
        namespace = series.key.regarding.namespace or "default"
        try:
            with kube_errors(f"update event {series.name}"):
                await self._client.patch(
                    Event, series.name, patch, namespace=namespace, patch_type=PatchType.MERGE
                )
        except ApiStatusError as error:
            if is_not_found(error):  # garbage-collected by the server's event TTL: start over
                await self._create(series)
                return
            _log.info("Event dropped", reason=series.key.reason, error=str(error))
            EVENTS_DROPPED.labels(reason="api_error").inc()
        series.written_count = count
        series.last_written = self.aggregator.clock()
