"""A rate-limited work queue with client-go semantics, and the worker loop that drains it.

Semantics (client-go ``workqueue.TypedRateLimitingInterface``):

- an item is queued at most once: adding it again while it waits is a no-op (the *dirty* set), and an
  item being processed that is added again is queued once more only when its worker calls ``done``
  (the *processing* set), so one key is never reconciled by two workers at once;
- ``add_after`` delays an add; of several pending delays for one item the earliest wins;
- ``add_rate_limited`` delays by the rate limiter: the larger of a per-item jittered exponential backoff
  (5 ms doubling to 60 s) and an overall token bucket (10/s, burst 100); ``forget`` resets the item;
- ``shut_down`` stops accepting items; ``get`` hands out what is already queued, then raises.

Upstream's controller queue deliberately does not de-duplicate (every event is its own item); we
key by object so a burst of events for one object costs one reconcile, which is level-triggered
anyway. The backoff cap is 60 s rather than client-go's 1000 s, upstream having found the long cap to
slow large formations (upstream commit 5d0641fb; docs/compatibility.md §3.1).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

import structlog

from imexdra.common.errors import DriverError, is_permanent
from imexdra.common.kube.client import retry_after
from imexdra.common.observability.logging import log_context
from imexdra.common.observability.metrics import (
    WORKQUEUE_ADDS,
    WORKQUEUE_DEPTH,
    WORKQUEUE_QUEUE_DURATION,
    WORKQUEUE_RETRIES,
    WORKQUEUE_WORK_DURATION,
)
from imexdra.common.pacing.ratelimit import ItemBackoff, TokenBucket

K = TypeVar("K", bound=Hashable)

_log = structlog.get_logger(__name__)


class ShutDownError(Exception):
    """The queue was shut down and holds no more items."""


class RateLimiter(Protocol):
    """Decides how long a failed item waits before its next attempt."""

    def when(self, item: Hashable, /) -> float:
        """Count a failure of ``item`` and return its delay in seconds."""

    def retries(self, item: Hashable, /) -> int:
        """Failures counted for ``item`` since it was last forgotten."""

    def forget(self, item: Hashable, /) -> None:
        """Stop tracking ``item``."""


@dataclass(slots=True)
class ControllerRateLimiter:
    """client-go's default controller limiter: the slower of per-item backoff and an overall bucket."""

    per_item: ItemBackoff = field(default_factory=ItemBackoff)
    overall: TokenBucket = field(default_factory=lambda: TokenBucket(rate=10.0, burst=100))

    def when(self, item: Hashable, /) -> float:
        """Count a failure of ``item`` and return the larger of both delays."""
        return max(self.per_item.when(item), self.overall.reserve())

    def retries(self, item: Hashable, /) -> int:
        """Failures counted for ``item``."""
        return self.per_item.retries(item)

    def forget(self, item: Hashable, /) -> None:
        """Reset ``item``'s backoff (the bucket has no per-item state)."""
        self.per_item.forget(item)


class WorkQueue(Generic[K]):
    """De-duplicating FIFO of keys with delayed and rate-limited adds; ``name`` labels its metrics."""

    def __init__(self, name: str, *, rate_limiter: RateLimiter | None = None) -> None:
        self.name = name
        self._limiter: RateLimiter = rate_limiter if rate_limiter is not None else ControllerRateLimiter()
        self._queue: deque[K] = deque()
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._queued_at: dict[K, float] = {}
        self._waiting: dict[K, asyncio.TimerHandle] = {}
        self._wakeup = asyncio.Event()
        self._shutting_down = False
        self._depth = WORKQUEUE_DEPTH.labels(name=name)
        self._depth.set(0)

    def __len__(self) -> int:
        """Items ready to be handed out (not counting delayed or in-process ones)."""
        return len(self._queue)

    def add(self, item: K) -> None:
        """Queue ``item`` unless it is already queued; an item in process is re-queued when done."""
        if self._shutting_down or item in self._dirty:
            return
        WORKQUEUE_ADDS.labels(name=self.name).inc()
        self._dirty.add(item)
        if item not in self._processing:
            self._push(item)

    def add_after(self, item: K, delay: float) -> None:
        """Queue ``item`` after ``delay`` seconds; an earlier pending delay for it is kept."""
        if self._shutting_down:
            return
        if delay <= 0:
            self.add(item)
            return
        loop = asyncio.get_running_loop()
        pending = self._waiting.get(item)
        if pending is not None:
            if pending.when() <= loop.time() + delay:
                return
            pending.cancel()
        self._waiting[item] = loop.call_later(delay, self._delay_elapsed, item)

    def add_rate_limited(self, item: K, *, at_least: float = 0.0) -> None:
        """Queue ``item`` after the rate limiter's delay (or ``at_least``, e.g. a server's Retry-After)."""
        WORKQUEUE_RETRIES.labels(name=self.name).inc()
        self.add_after(item, max(at_least, self._limiter.when(item)))

    def forget(self, item: K) -> None:
        """Reset ``item``'s backoff: call after it succeeded or was given up."""
        self._limiter.forget(item)

    def num_requeues(self, item: K) -> int:
        """How often ``item`` was rate-limited since it was last forgotten."""
        return self._limiter.retries(item)

    async def get(self) -> K:
        """Wait for the next item and mark it in process; raise :class:`ShutDownError` when drained."""
        while not self._queue:
            if self._shutting_down:
                raise ShutDownError(self.name)
            self._wakeup.clear()
            await self._wakeup.wait()
        item = self._queue.popleft()
        self._depth.set(len(self._queue))
        self._processing.add(item)
        self._dirty.discard(item)
        queued_at = self._queued_at.pop(item, None)
        if queued_at is not None:
            WORKQUEUE_QUEUE_DURATION.labels(name=self.name).observe(
                asyncio.get_running_loop().time() - queued_at
            )
        return item

    def done(self, item: K) -> None:
        """Mark ``item`` processed; if it was added meanwhile, queue it again now."""
        self._processing.discard(item)
        if item in self._dirty:
            self._push(item)

    def shut_down(self) -> None:
        """Refuse new items, drop pending delays and let waiting workers drain the rest and exit."""
        self._shutting_down = True
        for handle in self._waiting.values():
            handle.cancel()
        self._waiting.clear()
        self._wakeup.set()

    def _push(self, item: K) -> None:
        self._queue.append(item)
        self._queued_at[item] = asyncio.get_running_loop().time()
        self._depth.set(len(self._queue))
        self._wakeup.set()

    def _delay_elapsed(self, item: K) -> None:
        self._waiting.pop(item, None)
        self.add(item)


#: A reconcile function: raise to retry with backoff (or give up on a PermanentError); return a number of
#: seconds to be called again after that long, or None when done.
Reconcile = Callable[[K], Awaitable[float | None]]


async def run_workers(queue: WorkQueue[K], reconcile: Reconcile[K], *, workers: int = 1) -> None:
    """Process ``queue`` with ``workers`` concurrent tasks until it is shut down and drained.

    Each item is reconciled with ``queue`` and ``key`` bound in the logging context. Success forgets
    the item's backoff; a :class:`~imexdra.common.errors.PermanentError` is logged and forgotten (only a
    new event retries it); any other error re-queues it rate-limited, never sooner than a server's
    Retry-After. Cancelling this coroutine cancels the workers.
    """
    async with asyncio.TaskGroup() as group:
        for _ in range(workers):
            group.create_task(_work(queue, reconcile))


async def _work(queue: WorkQueue[K], reconcile: Reconcile[K]) -> None:
    loop = asyncio.get_running_loop()
    while True:
        try:
            item = await queue.get()
        except ShutDownError:
            return
        started = loop.time()
        with log_context(queue=queue.name, key=str(item)):
            try:
                requeue_after = await reconcile(item)
            except Exception as error:
                _handle_failure(queue, item, error)
            else:
                queue.forget(item)
                if requeue_after is not None:
                    queue.add_after(item, requeue_after)
            finally:
                queue.done(item)
                WORKQUEUE_WORK_DURATION.labels(name=queue.name).observe(loop.time() - started)


# Failures the outside world causes (API errors, network, timeouts); anything else is a bug.
_EXPECTED_FAILURES = (DriverError, OSError, TimeoutError)


def _handle_failure(queue: WorkQueue[K], item: K, error: Exception) -> None:
    if is_permanent(error):
        _log.warning("Reconcile: permanent error, not retrying", error=str(error))
        queue.forget(item)
        return
    attempt = queue.num_requeues(item) + 1
    if isinstance(error, _EXPECTED_FAILURES):
        _log.info(
            "Reconcile: failed, will retry",
            error=str(error),
            error_type=type(error).__name__,
            attempt=attempt,
        )
    else:
        # Not the world misbehaving but a bug in us: loud, with the traceback. Still retried, since a
        # level-triggered reconcile must not drop the item for good.
        _log.error(
            "Reconcile: crashed, will retry", error_type=type(error).__name__, attempt=attempt, exc_info=error
        )
    queue.add_rate_limited(item, at_least=retry_after(error) or 0.0)
