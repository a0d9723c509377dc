"""``imexdra_sim.waiting``: the first truthy result, one timeout error naming the wait, an early end."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest

from imexdra_sim.waiting import WaitTimeoutError, poll, poll_async


def counting_to(n: int) -> Callable[[], int | None]:
    """A check that holds from its ``n``-th call on, returning that call's number."""
    calls = itertools.count(1)
    return lambda: call if (call := next(calls)) >= n else None


def test_poll_returns_the_first_truthy_result() -> None:
    """The value of the call that held, not True."""
    assert poll("the third call", counting_to(3), within=10, interval=0) == 3


def test_poll_times_out_naming_the_wait_and_the_explanation() -> None:
    """A TimeoutError subclass whose message says what, for how long, and the caller's explanation."""
    with pytest.raises(TimeoutError) as caught:
        poll("never", lambda: None, within=0, interval=0, explain=lambda: "; the log ends: x")
    assert isinstance(caught.value, WaitTimeoutError)
    assert str(caught.value) == "timed out after 0s waiting for never; the log ends: x"
    assert (caught.value.what, caught.value.within) == ("never", 0)


def test_require_ends_the_wait_at_once_with_its_own_error() -> None:
    """A wait for something that can no longer happen fails with the cause, not the timeout."""

    def gone() -> None:
        raise RuntimeError("the child exited")

    with pytest.raises(RuntimeError, match="the child exited"):
        poll("the child's socket", lambda: True, within=60, interval=0, require=gone)


@pytest.mark.parametrize(
    ("tolerate", "outcome"),
    [((OSError,), "holds on the second call"), ((), "raises the first call's error")],
    ids=["tolerated", "not-tolerated"],
)
def test_tolerated_errors_count_as_not_yet(tolerate: tuple[type[Exception], ...], outcome: str) -> None:
    """A probe of a server still starting may fail to connect; only listed errors are swallowed."""
    calls = itertools.count(1)

    def probe() -> bool:
        if next(calls) == 1:
            raise ConnectionRefusedError
        return True

    if tolerate:
        assert poll("the probe", probe, within=10, interval=0, tolerate=tolerate) is True
    else:
        with pytest.raises(ConnectionRefusedError):
            poll("the probe", probe, within=10, interval=0, tolerate=tolerate)


async def test_poll_async_takes_plain_and_coroutine_checks() -> None:
    """Both kinds of check; a coroutine's result is awaited before it is judged."""
    plain = counting_to(2)

    async def coroutine() -> int | None:
        return plain()

    assert await poll_async("a plain check", counting_to(2), within=10, interval=0) == 2
    assert await poll_async("a coroutine check", coroutine, within=10, interval=0) == 2


async def test_poll_async_times_out_with_the_same_error() -> None:
    """The async poll raises the one timeout type too."""
    with pytest.raises(WaitTimeoutError, match=r"waiting for never$"):
        await poll_async("never", lambda: None, within=0, interval=0)
