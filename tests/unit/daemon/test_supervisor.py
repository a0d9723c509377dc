"""ImexSupervisor against FakeImex: restart backoff, reload pacing and coalescing, restarts, shutdown,
and giving up when the node's IMEX role is taken (NV_ERR_IN_USE).

On looptime's virtual clock: the supervisor's timers fire at once and at their exact time, so the
delays are asserted exactly and the windows in which nothing may happen cost no real time.
"""

from __future__ import annotations

import asyncio
import functools
import signal
from collections.abc import AsyncIterator

import pytest

from imexdra.common.pacing.ratelimit import Backoff
from imexdra.daemon.supervisor import ImexInUseError, ImexSupervisor
from imexdra_sim.devices.imex_fake import FakeImex
from tests.support.waiting import eventually, stays_true

pytestmark = pytest.mark.looptime

BASE = 0.1
INTERVAL = 0.3
STABLE_AFTER = 1.0
#: looptime's clock resolution: virtual timings are exact up to it.
TICK = 1e-6


#: Waits on the event loop with a 5 ms poll: the supervisor's timings here are tenths of a second.
until = functools.partial(eventually, within=5.0, interval=0.005)


@pytest.fixture
async def supervised() -> AsyncIterator[tuple[FakeImex, ImexSupervisor]]:
    """A supervisor with short timings running on a FakeImex; cancelled afterwards."""
    imex = FakeImex()
    supervisor = ImexSupervisor(
        imex,
        restart_backoff=Backoff(base=BASE, cap=BASE * 8, jitter=0.0),
        stable_after=STABLE_AFTER,
        reload_interval=INTERVAL,
        stop_grace=1.0,
    )
    task = asyncio.create_task(supervisor.run())
    yield imex, supervisor
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def usr1(imex: FakeImex) -> list[float]:
    return [r.at for r in imex.signals if r.signum == signal.SIGUSR1]


async def test_nothing_runs_before_start(supervised: tuple[FakeImex, ImexSupervisor]) -> None:
    """IMEX is not started until the first start() (the daemon waits for its own entry)."""
    imex, supervisor = supervised
    await stays_true("no start before start()", lambda: imex.starts == [], for_seconds=STABLE_AFTER)
    supervisor.reload()
    supervisor.restart()
    assert imex.signals == []
    supervisor.start()
    supervisor.start()
    await until("started", lambda: imex.pid is not None)
    await stays_true("one start for two start()s", lambda: len(imex.starts) == 1, for_seconds=STABLE_AFTER)


async def test_crash_restarts_with_growing_backoff(supervised: tuple[FakeImex, ImexSupervisor]) -> None:
    """Each crash of a short-lived IMEX waits twice as long as the previous one before the restart."""
    imex, supervisor = supervised
    loop = asyncio.get_running_loop()
    supervisor.start()
    crashed_at = []
    for crashes in range(1, 4):
        await until(f"start {crashes}", lambda n=crashes: len(imex.starts) == n and imex.pid is not None)
        crashed_at.append(loop.time())
        imex.exit(1)
    await until("fourth start", lambda: len(imex.starts) == 4)
    delays = [start.at - crash for start, crash in zip(imex.starts[1:], crashed_at, strict=True)]
    assert delays == pytest.approx([BASE, 2 * BASE, 4 * BASE], abs=TICK)
    assert supervisor.exits == 3


async def test_backoff_resets_after_a_stable_run(supervised: tuple[FakeImex, ImexSupervisor]) -> None:
    """A process that ran longer than ``stable_after`` restarts after the base delay again."""
    imex, supervisor = supervised
    supervisor.start()
    for n in (1, 2, 3):
        await until(f"start {n}", lambda n=n: len(imex.starts) == n and imex.pid is not None)
        if n < 3:
            imex.exit(1)
    await asyncio.sleep(STABLE_AFTER)  # the third process runs that long: a stable run
    exited_at = asyncio.get_running_loop().time()
    imex.exit(1)
    await until("restart after stable run", lambda: len(imex.starts) == 4)
    assert imex.starts[3].at - exited_at == pytest.approx(BASE, abs=TICK), "without the reset: 4 x BASE"


async def test_failed_starts_are_retried(supervised: tuple[FakeImex, ImexSupervisor]) -> None:
    """A start that fails (binary missing, port busy) is retried with backoff."""
    imex, supervisor = supervised
    imex.fail_next_starts = 2
    supervisor.start()
    await until("started after two failures", lambda: imex.pid is not None)
    assert len(imex.starts) == 1 and imex.fail_next_starts == 0


async def test_reload_waits_after_start_then_goes_at_once(
    supervised: tuple[FakeImex, ImexSupervisor],
) -> None:
    """No SIGUSR1 within the interval after a start; once it has passed a reload is immediate."""
    imex, supervisor = supervised
    supervisor.start()
    await until("started", lambda: imex.pid is not None)
    supervisor.reload()
    assert usr1(imex) == []
    await until("deferred reload", lambda: len(usr1(imex)) == 1, within=2)
    assert usr1(imex)[0] - imex.starts[0].at == pytest.approx(INTERVAL, abs=TICK)
    await asyncio.sleep(INTERVAL + TICK)  # the interval after that signal passes (its end exactly
    # is a rounding error away on either side)
    supervisor.reload()
    assert len(usr1(imex)) == 2, "a reload after the interval is sent synchronously"


async def test_reloads_inside_the_window_coalesce(supervised: tuple[FakeImex, ImexSupervisor]) -> None:
    """Many reload requests within the window become one signal at its end, never closer than the
    interval; that one is repeated once an interval later (IMEX may drop it, its 5 s counted from when
    it handled the previous one), and no more."""
    imex, supervisor = supervised
    supervisor.start()
    await until("started", lambda: imex.pid is not None)
    await asyncio.sleep(INTERVAL)  # past the window after the start: the first reload goes at once
    supervisor.reload()
    for _ in range(5):
        supervisor.reload()
        await asyncio.sleep(INTERVAL / 10)  # requests spread over the window
    await until("the repeat", lambda: len(usr1(imex)) == 3, within=2)
    await stays_true("three signals only", lambda: len(usr1(imex)) == 3, for_seconds=3 * INTERVAL)
    times = usr1(imex)
    assert supervisor.reloads == 3
    assert times[1] - times[0] == pytest.approx(INTERVAL, abs=TICK)
    assert times[2] - times[1] == pytest.approx(INTERVAL, abs=TICK)


async def test_a_request_soon_after_a_signal_is_repeated_once_a_lone_one_is_not(
    supervised: tuple[FakeImex, ImexSupervisor],
) -> None:
    """A reload sent less than two intervals after the previous signal is repeated once; one sent
    later, or the first after the start, is sent once."""
    imex, supervisor = supervised
    supervisor.start()
    await until("started", lambda: imex.pid is not None)
    await asyncio.sleep(INTERVAL)
    supervisor.reload()  # the first after the start's window: once
    await stays_true("one signal", lambda: len(usr1(imex)) == 1, for_seconds=3 * INTERVAL)
    supervisor.reload()  # three intervals after the previous signal: once
    await stays_true("two signals", lambda: len(usr1(imex)) == 2, for_seconds=3 * INTERVAL)
    supervisor.reload()  # again three intervals later: once
    await asyncio.sleep(INTERVAL * 1.5)
    supervisor.reload()  # 1.5 intervals after the previous signal: sent at once, then repeated
    assert len(usr1(imex)) == 4, "a reload after the interval is sent synchronously"
    await until("the repeat", lambda: len(usr1(imex)) == 5, within=2)
    await stays_true("five signals only", lambda: len(usr1(imex)) == 5, for_seconds=3 * INTERVAL)
    times = usr1(imex)
    assert times[4] - times[3] == pytest.approx(INTERVAL, abs=TICK)


async def test_restart_is_immediate_and_drops_pending_reload(
    supervised: tuple[FakeImex, ImexSupervisor],
) -> None:
    """A requested restart stops and starts at once (no backoff) and a pending SIGUSR1 is dropped."""
    imex, supervisor = supervised
    supervisor.start()
    await until("started", lambda: imex.pid is not None)
    supervisor.reload()  # deferred: inside the window after start
    supervisor.restart()
    await until("restarted", lambda: len(imex.starts) == 2 and imex.pid is not None)
    assert imex.starts[1].at - imex.starts[0].at < BASE
    assert [r.pid for r in imex.stops] == [imex.starts[0].pid]
    await stays_true(
        "no SIGUSR1 and no exit", lambda: usr1(imex) == [] and supervisor.exits == 0, for_seconds=3 * INTERVAL
    )


async def test_cancel_forwards_termination() -> None:
    """Cancelling the supervisor stops IMEX before run() returns."""
    imex = FakeImex()
    supervisor = ImexSupervisor(imex, stop_grace=1.0)
    task = asyncio.create_task(supervisor.run())
    supervisor.start()
    await until("started", lambda: imex.pid is not None)
    pid = imex.pid
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert imex.pid is None
    assert [r.pid for r in imex.stops] == [pid]


IN_USE_LINE = "[Dec 02 2026 00:00:00] [ERROR] [tid 7] Failed to register with the driver: NV_ERR_IN_USE"


def quick_supervisor(imex: FakeImex) -> ImexSupervisor:
    return ImexSupervisor(imex, restart_backoff=Backoff(base=BASE / 10, cap=BASE, jitter=0.0), stop_grace=1.0)


async def test_a_node_whose_imex_role_is_taken_ends_the_run_clearly() -> None:
    """Three NV_ERR_IN_USE exits in a row (the host's nvidia-imex holds the node) end run() saying why."""
    imex = FakeImex()
    supervisor = quick_supervisor(imex)
    supervisor.start()
    run = asyncio.create_task(supervisor.run())
    for n in (1, 2, 3):
        await until(f"start {n}", lambda n=n: len(imex.starts) == n and imex.pid is not None)
        imex.exit(1, output=("IMEX daemon starting", IN_USE_LINE))
    with pytest.raises(ImexInUseError) as failure:
        await asyncio.wait_for(run, timeout=5.0)
    message = str(failure.value)
    assert message.startswith("nvidia-imex failed with NV_ERR_IN_USE 3 times in a row")
    assert "the host's own nvidia-imex service" in message
    assert "systemctl disable --now nvidia-imex" in message
    assert "HostManagedIMEX" in message
    assert len(imex.starts) == 3


async def test_an_in_use_exit_between_others_is_only_restarted() -> None:
    """NV_ERR_IN_USE that does not repeat (a predecessor letting go) is restarted like any crash."""
    imex = FakeImex()
    supervisor = quick_supervisor(imex)
    supervisor.start()
    run = asyncio.create_task(supervisor.run())
    outputs = [(IN_USE_LINE,), (IN_USE_LINE,), ("Segmentation fault",), (IN_USE_LINE,), (IN_USE_LINE,)]
    for n, output in enumerate(outputs, start=1):
        await until(f"start {n}", lambda n=n: len(imex.starts) == n and imex.pid is not None)
        imex.exit(1, output=output)
    await until("sixth start", lambda: len(imex.starts) == 6 and imex.pid is not None)
    assert not run.done()
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
