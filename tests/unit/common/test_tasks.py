"""Service supervision (what ends a component, failures, bounded shutdown, stop signals) and settle.

On looptime's virtual clock (but for the test of a real signal): the stand-ins' short delays, which
order their endings, and the grace period cost no real time.
"""

import asyncio
import os
import signal

import pytest

from imexdra.common.process.tasks import settle, stop_on_signals, supervise
from tests.support.waiting import eventually

pytestmark = pytest.mark.looptime

#: looptime's clock resolution: virtual timings are exact up to it.
TICK = 1e-6


async def forever(cancelled: list[str], name: str, running: list[str] | None = None) -> None:
    """A service that runs until cancelled and records that it ran and was cancelled."""
    if running is not None:
        running.append(name)
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        cancelled.append(name)
        raise


async def test_stop_event_cancels_all_services() -> None:
    """Setting the stop event cancels every service and returns normally."""
    stop = asyncio.Event()
    cancelled: list[str] = []
    running: list[str] = []
    services = {"a": forever(cancelled, "a", running), "b": forever(cancelled, "b", running)}
    runner = asyncio.create_task(supervise(services, stop=stop, grace=1))
    await eventually("both services running", lambda: len(running) == 2, within=1, interval=0.001)
    stop.set()
    await asyncio.wait_for(runner, 2)
    assert sorted(cancelled) == ["a", "b"]


async def test_failing_service_cancels_the_others_and_raises() -> None:
    """The first failure stops everything and is raised to main."""
    cancelled: list[str] = []

    async def fails() -> None:
        await asyncio.sleep(0.01)  # "good" is running by then
        raise RuntimeError("informer died")

    with pytest.raises(RuntimeError, match="informer died"):
        await asyncio.wait_for(
            supervise({"bad": fails(), "good": forever(cancelled, "good")}, stop=asyncio.Event()), 2
        )
    assert cancelled == ["good"]


async def test_service_returning_ends_the_others() -> None:
    """A service that returns (e.g. leader work after losing the lease) ends the component cleanly."""
    cancelled: list[str] = []

    async def finishes() -> None:
        await asyncio.sleep(0.01)  # "other" is running by then

    await asyncio.wait_for(
        supervise({"done": finishes(), "other": forever(cancelled, "other")}, stop=asyncio.Event()), 2
    )
    assert cancelled == ["other"]


async def test_grace_bounds_slow_cleanup() -> None:
    """A service that ignores cancellation is abandoned after the grace period."""
    stop = asyncio.Event()
    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            try:
                await asyncio.Event().wait()  # until cancelled
            except asyncio.CancelledError:
                await release.wait()

    stop.set()
    loop = asyncio.get_running_loop()
    started = loop.time()
    await supervise({"stubborn": stubborn()}, stop=stop, grace=0.1)
    assert loop.time() - started == pytest.approx(0.1, abs=TICK)
    release.set()


@pytest.mark.looptime(False)  # a real signal arrives through the loop's self-pipe, on the real clock
async def test_sigterm_sets_the_stop_event() -> None:
    """SIGTERM sets the stop event instead of killing the process."""
    loop = asyncio.get_running_loop()
    stop = stop_on_signals()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(stop.wait(), 2)
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)


async def test_settle_raises_only_once_every_step_has_ended() -> None:
    """A failing step does not leave its siblings running unawaited: settle waits for them, then raises."""
    finished: list[str] = []

    async def fails() -> int:
        raise RuntimeError("create DaemonSet: 500")

    async def slow_write() -> int:
        await asyncio.sleep(0.05)  # ends after the failure
        finished.append("claim template created")
        return 1

    with pytest.raises(RuntimeError, match="500"):
        await settle(fails(), slow_write())
    assert finished == ["claim template created"]


async def test_settle_returns_results_in_order_and_raises_the_first_failure_in_order() -> None:
    """Results and the raised failure follow argument order, not completion order."""

    async def later(value: str) -> str:
        await asyncio.sleep(0.02)  # completes after the one that follows it
        return value

    async def fails_later() -> str:
        await asyncio.sleep(0.02)  # fails after the one that follows it
        raise ValueError("first")

    async def fails_at_once() -> str:
        raise KeyError("second")

    assert await settle(later("a"), asyncio.sleep(0, "b")) == ["a", "b"]
    with pytest.raises(ValueError, match="first"):
        await settle(fails_later(), fails_at_once())
