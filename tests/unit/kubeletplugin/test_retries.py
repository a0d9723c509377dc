"""Per-call retries (docs/errors.md §3.3): attempts, backoff, the budget, left-out claims, wake-ups.

On looptime's virtual clock: backoffs, the bucket's refill and the budget elapse exactly and at no
real cost, so their delays are asserted exactly.
"""

import asyncio
import itertools

import pytest

from imexdra.common.pacing.pulse import Pulse
from imexdra.kubeletplugin.retries import Done, Retry, RetryPolicy, run_until_done

pytestmark = pytest.mark.looptime

#: looptime's clock resolution: virtual timings are exact up to it.
TICK = 1e-6

FAST = RetryPolicy(budget=2.0, retry_base=0.01, retry_cap=0.04, bucket_rate=1000.0, bucket_burst=100)


def scripted(outcomes: list[object], log: list[tuple[str, float]], key: str):  # type: ignore[no-untyped-def]
    async def attempt() -> Done[object] | Retry:
        log.append((key, asyncio.get_running_loop().time()))
        outcome = outcomes.pop(0)
        return outcome if isinstance(outcome, Retry) else Done(outcome)

    return attempt


async def test_first_attempt_runs_at_once() -> None:
    """No initial rate-limit delay: a healthy claim finishes on its first attempt immediately."""
    log: list[tuple[str, float]] = []
    start = asyncio.get_running_loop().time()
    assert await run_until_done([("a", scripted(["ok"], log, "a"))]) == {"a": "ok"}
    assert log[0][1] == start


async def test_retries_back_off_exponentially_up_to_the_cap() -> None:
    """Delays double from the base and stop growing at the cap."""
    log: list[tuple[str, float]] = []
    outcomes: list[object] = [Retry("x")] * 4 + ["ok"]
    policy = RetryPolicy(budget=5.0, retry_base=0.05, retry_cap=0.2, bucket_rate=1000.0, bucket_burst=100)
    assert await run_until_done([("a", scripted(outcomes, log, "a"))], policy) == {"a": "ok"}
    gaps = [b[1] - a[1] for a, b in itertools.pairwise(log)]
    assert gaps == pytest.approx([0.05, 0.1, 0.2, 0.2], abs=TICK)


def test_default_policy_is_upstreams() -> None:
    """45 s budget, 250 ms doubling to 3 s, bucket 5/s burst 10."""
    policy = RetryPolicy()
    assert (policy.budget, policy.retry_base, policy.retry_cap) == (45.0, 0.25, 3.0)
    assert (policy.bucket_rate, policy.bucket_burst) == (5.0, 10)


async def test_claims_run_one_at_a_time_and_interleave_retries() -> None:
    """While one claim waits to retry, the next claim's attempt runs; attempts never overlap."""
    running = 0
    overlap = False
    order: list[str] = []

    def make(key: str, outcomes: list[object]):  # type: ignore[no-untyped-def]
        async def attempt() -> Done[object] | Retry:
            nonlocal running, overlap
            running += 1
            overlap |= running > 1
            order.append(key)
            await asyncio.sleep(0.001)  # the attempt takes a while: another one could start meanwhile
            running -= 1
            outcome = outcomes.pop(0)
            return outcome if isinstance(outcome, Retry) else Done(outcome)

        return attempt

    results = await run_until_done([("a", make("a", [Retry("wait"), "A"])), ("b", make("b", ["B"]))], FAST)
    assert results == {"a": "A", "b": "B"}
    assert order == ["a", "b", "a"]
    assert not overlap


async def test_budget_leaves_unfinished_claims_out() -> None:
    """A claim that keeps asking for retries is absent from the results when the budget ends."""
    log: list[tuple[str, float]] = []
    policy = RetryPolicy(budget=0.2, retry_base=0.01, retry_cap=0.02, bucket_rate=1000.0, bucket_burst=100)
    forever: list[object] = [Retry("never")] * 1000
    results = await run_until_done(
        [("stuck", scripted(forever, log, "stuck")), ("fine", scripted(["ok"], log, "fine"))], policy
    )
    assert results == {"fine": "ok"}
    assert len([k for k, _ in log if k == "stuck"]) > 3


async def test_budget_cancels_a_hanging_attempt() -> None:
    """An attempt still running when the budget ends is cancelled and its claim left out."""

    async def hang() -> Done[object] | Retry:
        await asyncio.Event().wait()  # until cancelled
        return Done("late")

    policy = RetryPolicy(budget=0.1)
    loop = asyncio.get_running_loop()
    start = loop.time()
    assert await run_until_done([("h", hang)], policy) == {}
    assert loop.time() - start == pytest.approx(0.1, abs=TICK)


async def test_token_bucket_spaces_retries_of_many_claims() -> None:
    """With the bucket exhausted, retries wait for tokens even when their backoff is short."""
    log: list[tuple[str, float]] = []
    policy = RetryPolicy(budget=2.0, retry_base=0.001, retry_cap=0.001, bucket_rate=20.0, bucket_burst=1)
    attempts = [(k, scripted([Retry("x"), "ok"], log, k)) for k in ("a", "b", "c")]
    start = asyncio.get_running_loop().time()
    assert await run_until_done(attempts, policy) == {"a": "ok", "b": "ok", "c": "ok"}
    retries = [t - start for _, t in log[3:]]
    # The first retry takes the burst (after its 1 ms backoff); each further one waits for the next
    # token, one per 50 ms.
    assert retries == pytest.approx([0.001, 0.05, 0.1], abs=TICK)


SLOW = RetryPolicy(budget=5.0, retry_base=3.0, retry_cap=3.0, bucket_rate=1000.0, bucket_burst=100)


async def test_a_change_fired_during_the_wait_makes_the_retry_due_at_once() -> None:
    """A pulse fired while a claim waits out a 3 s backoff retries it right away."""
    wake = Pulse()
    log: list[tuple[str, float]] = []
    loop = asyncio.get_running_loop()
    loop.call_later(0.05, wake.fire)
    start = loop.time()
    results = await run_until_done([("a", scripted([Retry("not ready"), "ok"], log, "a"))], SLOW, wake=wake)
    assert results == {"a": "ok"}
    assert log[1][1] - start == pytest.approx(0.05, abs=TICK)


async def test_a_change_fired_during_the_attempt_is_not_lost() -> None:
    """A pulse fired while the attempt runs (after it looked, before it waits) still ends the wait."""
    wake = Pulse()
    outcomes: list[object] = [Retry("not ready"), "ok"]
    times: list[float] = []

    async def attempt() -> Done[object] | Retry:
        times.append(asyncio.get_running_loop().time())
        outcome = outcomes.pop(0)
        if isinstance(outcome, Retry):
            wake.fire()  # the state changes right after this attempt looked at it
            return outcome
        return Done(outcome)

    assert await run_until_done([("a", attempt)], SLOW, wake=wake) == {"a": "ok"}
    assert times[1] - times[0] < SLOW.retry_base


async def test_without_a_change_the_backoff_holds() -> None:
    """No pulse: the retry waits its backoff (the wake-up is not a busy loop)."""
    log: list[tuple[str, float]] = []
    policy = RetryPolicy(budget=2.0, retry_base=0.2, retry_cap=0.2, bucket_rate=1000.0, bucket_burst=100)
    results = await run_until_done([("a", scripted([Retry("x"), "ok"], log, "a"))], policy, wake=Pulse())
    assert results == {"a": "ok"}
    assert log[1][1] - log[0][1] == pytest.approx(0.2, abs=TICK)
