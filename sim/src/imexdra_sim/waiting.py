"""Polling until a condition holds: the one way the tests, the benchmarks and the simulator wait.

``poll`` blocks (the local cluster's start-up, the demo, kubectl-driven tests); ``poll_async`` sleeps
on the running event loop, so whatever else runs there keeps going, and on that loop's clock, so a
test on looptime's virtual clock (docs/testing.md) waits no real time. Both return the first truthy
result of ``check`` and, once ``within`` seconds have passed, raise :class:`WaitTimeoutError` naming what
was waited for.

A wait that depends on something which can fail for good (a child process that exited) passes
``require``: it runs before every check and raises to end the wait at once, with the real cause,
instead of letting the wait run into its timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

T = TypeVar("T")


class WaitTimeoutError(TimeoutError):
    """A condition did not hold in time; the message names it and the time waited."""

    def __init__(self, what: str, within: float, explanation: str = "") -> None:
        super().__init__(f"timed out after {within:g}s waiting for {what}{explanation}")
        self.what = what
        self.within = within


def poll(
    what: str,
    check: Callable[[], T | None],
    *,
    within: float,
    interval: float,
    require: Callable[[], None] | None = None,
    explain: Callable[[], str] | None = None,
    tolerate: tuple[type[Exception], ...] = (),
) -> T:
    """Call ``check`` every ``interval`` seconds until it returns something truthy, and return that.

    ``require`` runs before each check and raises to give up early. ``explain`` adds to the timeout's
    message (a log's tail, say). Exceptions of ``check`` listed in ``tolerate`` count as "not yet": a
    health probe of a server that is still starting fails to connect.
    """
    deadline = time.monotonic() + within
    while True:
        if require is not None:
            require()
        result = None
        with contextlib.suppress(*tolerate):
            result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise WaitTimeoutError(what, within, explain() if explain is not None else "")
        time.sleep(interval)


@overload
async def poll_async(
    what: str,
    check: Callable[[], Awaitable[T | None]],
    *,
    within: float,
    interval: float,
    require: Callable[[], None] | None = None,
    explain: Callable[[], str] | None = None,
) -> T: ...


@overload
async def poll_async(
    what: str,
    check: Callable[[], T | None],
    *,
    within: float,
    interval: float,
    require: Callable[[], None] | None = None,
    explain: Callable[[], str] | None = None,
) -> T: ...


async def poll_async(
    what: str,
    check: Callable[[], Any],
    *,
    within: float,
    interval: float,
    require: Callable[[], None] | None = None,
    explain: Callable[[], str] | None = None,
) -> Any:
    """``poll`` on the running event loop; ``check`` may be a plain function or a coroutine function."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        if require is not None:
            require()
        result = check()
        if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
            result = await result
        if result:
            return result
        if loop.time() > deadline:
            raise WaitTimeoutError(what, within, explain() if explain is not None else "")
        await asyncio.sleep(interval)
