"""Each claim of one gRPC call tried until done, with upstream's budget and backoff (docs/errors.md §3.3).

Per call: a 45 s budget; claims are attempted one at a time (concurrency only comes from concurrent
calls, serialised per claim by ``pu.lock``); an attempt either finishes the claim — success, or an
error that retrying cannot fix — or asks for a retry. Retries wait the larger of a per-claim
exponential backoff (250 ms doubling to 3 s) and a per-call token bucket (5/s, burst 10), upstream's
prepare/unprepare limiter; other claims' attempts run in the meantime. A claim still unfinished when
the budget ends is left out of the results, which the kubelet reports as "left out N claims" and
retries on a later pod sync.

Deliberate differences: upstream delays even the first attempt by ~250 ms (every enqueue is
rate-limited); here the first attempt runs at once, which is most of a healthy prepare's latency. And
a ``wake`` pulse (the plugin fires it when a ComputeDomain changes) makes every waiting retry due at
once: a channel claim waiting for its IMEX daemon is retried when the domain's status says the daemon
is Ready, not up to 3 s of backoff later.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from imexdra.common.pacing.pulse import Pulse
from imexdra.common.pacing.ratelimit import ItemBackoff, TokenBucket

T = TypeVar("T")

BUDGET = 45.0
RETRY_BASE = 0.25
RETRY_CAP = 3.0
BUCKET_RATE = 5.0
BUCKET_BURST = 10


@dataclass(frozen=True, slots=True)
class Done(Generic[T]):
    """The claim is finished with ``value`` (a result or a final error, the caller decides)."""

    value: T


@dataclass(frozen=True, slots=True)
class Retry:
    """Try the claim again later; ``reason`` is logged by the caller."""

    reason: str


Attempt = Callable[[], Awaitable[Done[T] | Retry]]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Timings of one call; the defaults are upstream's."""

    budget: float = BUDGET
    retry_base: float = RETRY_BASE
    retry_cap: float = RETRY_CAP
    bucket_rate: float = BUCKET_RATE
    bucket_burst: int = BUCKET_BURST


DEFAULT_POLICY = RetryPolicy()


async def run_until_done(
    attempts: Sequence[tuple[str, Attempt[T]]],
    policy: RetryPolicy = DEFAULT_POLICY,
    *,
    wake: Pulse | None = None,
) -> dict[str, T]:
    """Run each keyed attempt until it is ``Done`` or the budget ends; return the finished values.

    A change fired on ``wake`` after an attempt started makes every waiting retry due at once.
    """
    loop = asyncio.get_running_loop()
    backoff = ItemBackoff(base=policy.retry_base, cap=policy.retry_cap, jitter=0.0)
    # The bucket's tokens refill on the loop's clock, the one the budget and the retry times are on.
    bucket = TokenBucket(rate=policy.bucket_rate, burst=policy.bucket_burst, clock=loop.time)
    order = itertools.count()
    pending: list[tuple[float, int, str, Attempt[T]]] = [
        (loop.time(), next(order), key, attempt) for key, attempt in attempts
    ]
    finished: dict[str, T] = {}
    seen = wake.generation if wake is not None else 0
    try:
        async with asyncio.timeout(policy.budget):
            while pending:
                # Once its wait is slept (or a change made every retry due), the first entry is due:
                # looking at the clock again could find it a rounding error short of its time.
                wait = pending[0][0] - loop.time()
                if wait > 0 and await _woken(wake, seen, wait):
                    now = loop.time()
                    pending = [(min(at, now), n, k, a) for at, n, k, a in pending]
                    heapq.heapify(pending)
                _, _, key, attempt = heapq.heappop(pending)
                seen = wake.generation if wake is not None else 0
                outcome = await attempt()
                if isinstance(outcome, Done):
                    finished[key] = outcome.value
                    continue
                delay = max(backoff.when(key), bucket.reserve())
                heapq.heappush(pending, (loop.time() + delay, next(order), key, attempt))
    except TimeoutError:
        pass  # what is unfinished is left out; the kubelet retries it later
    return finished


async def _woken(wake: Pulse | None, seen: int, wait: float) -> bool:
    """Sleep ``wait`` seconds; True if ``wake`` fired a change after ``seen`` (ending the sleep early)."""
    if wake is None:
        await asyncio.sleep(wait)
        return False
    return await wake.wait_past(seen, wait)
