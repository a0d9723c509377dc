"""Work queue semantics (client-go's): de-duplication while queued and while processing, delayed and
rate-limited adds, forget, shutdown; and the worker loop's success, retry, give-up and requeue paths.

On looptime's virtual clock: delays and backoffs elapse exactly and at no real cost.
"""

import asyncio
import itertools
from collections.abc import Hashable

import pytest
from prometheus_client import REGISTRY
from structlog.testing import capture_logs

from imexdra.common.errors import PermanentError, RetryableError
from imexdra.common.kube.client import RetryableApiError
from imexdra.common.machinery.workqueue import ControllerRateLimiter, ShutDownError, WorkQueue, run_workers
from imexdra.common.pacing.ratelimit import ItemBackoff
from tests.support.waiting import stays_true

pytestmark = pytest.mark.looptime

#: looptime's clock resolution: virtual timings are exact up to it.
TICK = 1e-6

_names = itertools.count()


def new_queue(*, base: float = 0.001, cap: float = 0.05) -> WorkQueue[str]:
    """A queue with a unique metrics name and fast, unjittered backoff."""
    limiter = ControllerRateLimiter(per_item=ItemBackoff(base=base, cap=cap, jitter=0.0))
    return WorkQueue(f"test-{next(_names)}", rate_limiter=limiter)


async def drain(queue: WorkQueue[str]) -> list[str]:
    """Take (and finish) everything currently queued."""
    items = []
    while len(queue):
        item = await queue.get()
        queue.done(item)
        items.append(item)
    return items


async def test_add_deduplicates_queued_items() -> None:
    """Adding an item that is already waiting does not queue it twice; order is FIFO."""
    queue = new_queue()
    for item in ["a", "b", "a", "c", "b"]:
        queue.add(item)
    assert await drain(queue) == ["a", "b", "c"]


async def test_item_added_while_processing_is_requeued_on_done() -> None:
    """An item re-added while a worker holds it waits for done, then is queued exactly once."""
    queue = new_queue()
    queue.add("a")
    item = await queue.get()
    queue.add("a")
    queue.add("a")
    assert len(queue) == 0  # never handed to a second worker concurrently
    queue.done(item)
    assert await drain(queue) == ["a"]


async def test_done_without_readd_does_not_requeue() -> None:
    """Finishing an item nobody re-added leaves the queue empty."""
    queue = new_queue()
    queue.add("a")
    queue.done(await queue.get())
    assert len(queue) == 0


async def test_add_after_orders_by_deadline() -> None:
    """Delayed items become ready in deadline order, not insertion order."""
    queue = new_queue()
    queue.add_after("late", 0.06)
    queue.add_after("early", 0.02)
    queue.add_after("now", 0)
    got = [await asyncio.wait_for(queue.get(), 1) for _ in range(3)]
    assert got == ["now", "early", "late"]


async def test_add_after_keeps_the_earliest_deadline() -> None:
    """A later delay for an item already waiting is ignored; an earlier one replaces it."""
    queue = new_queue()
    queue.add_after("a", 0.03)
    queue.add_after("a", 5.0)
    assert await asyncio.wait_for(queue.get(), 1) == "a"
    queue.done("a")
    queue.add_after("b", 5.0)
    queue.add_after("b", 0.01)
    assert await asyncio.wait_for(queue.get(), 1) == "b"


async def test_rate_limited_backoff_grows_and_forget_resets() -> None:
    """Each rate-limited add of a failing item waits longer, up to the cap; forget starts over."""
    queue = new_queue(base=0.02, cap=0.08)
    loop = asyncio.get_running_loop()
    waits = []
    for _ in range(4):
        start = loop.time()
        queue.add_rate_limited("a")
        queue.done(await asyncio.wait_for(queue.get(), 1))
        waits.append(loop.time() - start)
    assert queue.num_requeues("a") == 4
    assert waits[0] < waits[1] < waits[2]
    assert waits[3] == pytest.approx(0.08, abs=0.035)  # capped
    queue.forget("a")
    assert queue.num_requeues("a") == 0


async def test_rate_limited_honours_at_least() -> None:
    """A server's Retry-After (at_least) wins over a shorter backoff."""
    queue = new_queue()
    loop = asyncio.get_running_loop()
    start = loop.time()
    queue.add_rate_limited("a", at_least=0.1)
    await asyncio.wait_for(queue.get(), 1)
    assert loop.time() - start == pytest.approx(0.1, abs=TICK)


async def test_shutdown_drains_then_raises_and_refuses_new_items() -> None:
    """After shut_down, queued items are still handed out, new and delayed ones are dropped."""
    queue = new_queue()
    queue.add("a")
    queue.add_after("delayed", 0.01)
    queue.shut_down()
    queue.add("b")
    assert await queue.get() == "a"
    with pytest.raises(ShutDownError):
        await asyncio.wait_for(queue.get(), 1)
    await stays_true(
        "the delayed item stays dropped", lambda: len(queue) == 0, for_seconds=0.1, interval=0.005
    )


async def test_shutdown_wakes_idle_getters() -> None:
    """Workers blocked in get() return promptly when the queue shuts down."""
    queue = new_queue()
    getters = [asyncio.create_task(queue.get()) for _ in range(3)]
    await asyncio.sleep(0)
    queue.shut_down()
    results = await asyncio.wait_for(asyncio.gather(*getters, return_exceptions=True), 1)
    assert all(isinstance(r, ShutDownError) for r in results)


async def test_metrics_track_depth_adds_and_retries() -> None:
    """Depth, adds and retries are exported under the queue's name."""
    queue = new_queue()
    queue.add("a")
    queue.add("b")
    queue.add("a")
    labels = {"name": queue.name}
    assert REGISTRY.get_sample_value("workqueue_depth", labels) == 2
    assert REGISTRY.get_sample_value("workqueue_adds_total", labels) == 2
    queue.add_rate_limited("c")
    assert REGISTRY.get_sample_value("workqueue_retries_total", labels) == 1
    await drain(queue)
    assert REGISTRY.get_sample_value("workqueue_depth", labels) == 0


async def run_until_idle(queue: WorkQueue[str], reconcile, *, workers: int = 1, settle: float = 0.2) -> None:
    """Run workers for ``settle`` seconds (virtual: every backoff here ends well inside), then shut the
    queue down and wait for them."""
    runner = asyncio.create_task(run_workers(queue, reconcile, workers=workers))
    await asyncio.sleep(settle)
    queue.shut_down()
    await asyncio.wait_for(runner, 2)


async def test_workers_forget_on_success() -> None:
    """A successful reconcile resets the item's backoff."""
    queue = new_queue()
    seen: list[str] = []

    async def reconcile(key: str) -> None:
        seen.append(key)

    queue.add_rate_limited("a")
    await run_until_idle(queue, reconcile)
    assert seen == ["a"]
    assert queue.num_requeues("a") == 0


async def test_workers_retry_retryable_errors_until_success() -> None:
    """A failing item is re-queued with backoff and retried until it succeeds."""
    queue = new_queue()
    attempts: list[str] = []

    async def reconcile(key: str) -> None:
        attempts.append(key)
        if len(attempts) < 3:
            raise RetryableError("not yet")

    queue.add("a")
    await run_until_idle(queue, reconcile)
    assert attempts == ["a", "a", "a"]
    assert queue.num_requeues("a") == 0


@pytest.mark.parametrize(
    ("error", "level", "event"),
    [
        (RetryableError("conflict"), "info", "Reconcile: failed, will retry"),
        (NameError("name 'spec' is not defined"), "error", "Reconcile: crashed, will retry"),
    ],
    ids=["world", "bug"],
)
async def test_workers_log_bugs_loudly_and_still_retry(error: Exception, level: str, event: str) -> None:
    """A bug (not an API or I/O failure) is logged at error with its traceback; both kinds are retried."""
    queue = new_queue()
    attempts: list[str] = []

    async def reconcile(key: str) -> None:
        attempts.append(key)
        if len(attempts) == 1:
            raise error

    queue.add("a")
    with capture_logs() as logs:
        await run_until_idle(queue, reconcile)
    assert attempts == ["a", "a"]
    failures = [entry for entry in logs if entry["event"].startswith("Reconcile: ")]
    assert [(entry["log_level"], entry["event"]) for entry in failures] == [(level, event)]
    assert ("exc_info" in failures[0]) == (level == "error")


async def test_workers_give_up_on_permanent_errors() -> None:
    """A permanent error is not retried and its backoff is forgotten."""
    queue = new_queue()
    attempts: list[str] = []

    async def reconcile(key: str) -> None:
        attempts.append(key)
        raise PermanentError("bad spec")

    queue.add("a")
    await run_until_idle(queue, reconcile)
    assert attempts == ["a"]
    assert queue.num_requeues("a") == 0


async def test_workers_retry_a_retryable_error_raised_from_a_permanent_one() -> None:
    """The outermost of our errors decides: a 403 the controller's writer made retryable is retried."""
    queue = new_queue()
    attempts: list[str] = []

    async def reconcile(key: str) -> None:
        attempts.append(key)
        if len(attempts) == 1:
            try:
                raise PermanentError("403 Forbidden")
            except PermanentError as error:
                raise RetryableError("create daemonset: 403 Forbidden") from error

    queue.add("a")
    await run_until_idle(queue, reconcile)
    assert attempts == ["a", "a"]


async def test_workers_respect_retry_after() -> None:
    """A throttled API error is retried no sooner than its Retry-After."""
    queue = new_queue()
    loop = asyncio.get_running_loop()
    times: list[float] = []

    async def reconcile(key: str) -> None:
        times.append(loop.time())
        if len(times) == 1:
            raise RetryableApiError("throttled", code=429, retry_after=0.15)

    queue.add("a")
    await run_until_idle(queue, reconcile, settle=0.4)
    assert len(times) == 2
    assert times[1] - times[0] == pytest.approx(0.15, abs=TICK)


async def test_workers_requeue_after_returned_delay() -> None:
    """Returning a number of seconds schedules the item again after that long."""
    queue = new_queue()
    calls: list[str] = []

    async def reconcile(key: str) -> float | None:
        calls.append(key)
        return 0.05 if len(calls) == 1 else None

    queue.add("a")
    await run_until_idle(queue, reconcile)
    assert calls == ["a", "a"]


async def test_one_key_is_never_reconciled_concurrently() -> None:
    """With idle workers to spare, a key added again while in flight waits for it, then runs once more.

    The reconciles are held in flight, so the outcome does not depend on how fast the machine is: four
    more adds of each key while both are in flight make exactly one more reconcile of each.
    """
    queue = new_queue()
    active: set[Hashable] = set()
    overlaps = 0
    processed = 0
    release, both_in_flight, all_done = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def reconcile(key: str) -> None:
        nonlocal overlaps, processed
        overlaps += key in active
        active.add(key)
        if len(active) == 2:
            both_in_flight.set()
        await release.wait()
        active.discard(key)
        processed += 1
        if processed == 4:
            all_done.set()

    runner = asyncio.create_task(run_workers(queue, reconcile, workers=4))
    queue.add("a")
    queue.add("b")
    await asyncio.wait_for(both_in_flight.wait(), 2)
    for _ in range(4):
        queue.add("a")
        queue.add("b")
        await asyncio.sleep(0)  # the two idle workers get their chance to (wrongly) take a key
    release.set()
    await asyncio.wait_for(all_done.wait(), 2)
    queue.shut_down()
    await asyncio.wait_for(runner, 2)
    assert overlaps == 0
    assert processed == 4  # de-duplicated: one more reconcile per key, whatever the number of adds


async def test_cancelling_workers_stops_them() -> None:
    """Cancelling run_workers cancels its workers, including one mid-reconcile."""
    queue = new_queue()
    started = asyncio.Event()

    async def reconcile(key: str) -> None:
        started.set()
        await asyncio.Event().wait()  # until cancelled

    queue.add("a")
    runner = asyncio.create_task(run_workers(queue, reconcile, workers=2))
    await asyncio.wait_for(started.wait(), 1)
    runner.cancel()
    with pytest.raises(asyncio.CancelledError):
        await runner
    queue.add("a")
    assert len(queue) == 1  # done() ran for the cancelled item, so it can be queued again
