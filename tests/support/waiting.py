"""Polling until a condition holds, the one way every test waits.

``eventually`` is for async tests (it sleeps on the event loop, so the controller or stand-ins running
there keep going); ``wait_until`` is for the blocking e2e tests, which drive a cluster through
``kubectl`` only. Both return the first truthy result and fail the test naming what they waited for.

``stays_true`` is the other side: a deliberate negative window ("still one leader after several renew
periods", "no write after a restart"). It checks throughout a stated, bounded window instead of
sleeping blindly and asserting once, so it fails the moment the condition breaks and says when.

In a module on looptime's virtual clock (``pytest.mark.looptime``, docs/testing.md) all three poll
on that clock: the windows and intervals cost no real time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest


def _timed_out(what: str, within: float) -> None:
    pytest.fail(f"timed out after {within:g}s waiting for {what}")


async def eventually(
    what: str, check: Callable[[], Any | Awaitable[Any]], within: float = 60.0, interval: float = 0.5
) -> Any:
    """Poll a sync or async predicate until it returns something truthy, and return that."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        result = check()
        if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
            result = await result
        if result:
            return result
        if loop.time() > deadline:
            _timed_out(what, within)
        await asyncio.sleep(interval)


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
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            _timed_out(what, timeout)
        time.sleep(interval)
