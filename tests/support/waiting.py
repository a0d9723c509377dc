"""The tests' waits: the simulator's polling (``imexdra_sim.waiting``) failing the test, and ``stays_true``.

``eventually`` is for async tests (it sleeps on the event loop, so the controller or stand-ins running
there keep going); ``wait_until`` is for the blocking e2e tests, which drive a cluster through
``kubectl`` only. Both return the first truthy result; a timeout fails the test (``pytest.fail``, as
an assertion does, not an error) naming what they waited for.

``stays_true`` is the other side: a deliberate negative window ("still one leader after several renew
periods", "no write after a restart"). It checks throughout a stated, bounded window instead of
sleeping blindly and asserting once, so it fails the moment the condition breaks and says when.

In a module on looptime's virtual clock (``pytest.mark.looptime``, docs/testing.md) the async two
poll on that clock: the windows and intervals cost no real time.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from imexdra_sim.waiting import WaitTimeoutError, poll, poll_async


async def eventually(
    what: str, check: Callable[[], Any | Awaitable[Any]], within: float = 60.0, interval: float = 0.5
) -> Any:
    """Poll a sync or async predicate until it returns something truthy, and return that."""
    try:
        return await poll_async(what, check, within=within, interval=interval)
    except WaitTimeoutError as timeout:
        raise pytest.fail.Exception(str(timeout)) from None


async def stays_true(
    what: str, check: Callable[[], Any | Awaitable[Any]], for_seconds: float, interval: float = 0.05
) -> None:
    """Poll a sync or async predicate for at least ``for_seconds``; fail as soon as it returns a falsy value.

    The last check comes at the end of the window or up to one ``interval`` after it.
    """
    loop = asyncio.get_running_loop()
    started = loop.time()
    while True:
        result = check()
        if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
            result = await result
        elapsed = loop.time() - started
        if not result:
            pytest.fail(f"{what} stopped holding {elapsed:.2f}s into a {for_seconds:g}s window")
        if elapsed >= for_seconds:
            return
        await asyncio.sleep(interval)


def wait_until(what: str, check: Callable[[], Any], timeout: float = 180, interval: float = 1.0) -> Any:
    """Poll ``check`` until it returns something truthy, blocking; return that."""
    try:
        return poll(what, check, within=timeout, interval=interval)
    except WaitTimeoutError as error:
        raise pytest.fail.Exception(str(error)) from None
