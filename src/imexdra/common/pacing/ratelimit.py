"""Backoff and rate-limit primitives: the work queue, the reflector and the API client pace with these.

One implementation of "wait longer after each failure" and "no more than N per second" so every
retry path in the project behaves the same. Jitter is always applied *downwards* (a delay never
exceeds its cap): correlated retries of many peers are what turned upstream's 409s into storms
(upstream commit 3bb26bff), and a hard cap keeps worst-case latency predictable.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field


def exponential_delay(
    failures: int, *, base: float, cap: float, jitter: float = 0.0, factor: float = 2.0
) -> float:
    """Delay before retry number ``failures`` (0 = first retry): ``base·factor^failures``, capped, jittered.

    ``jitter`` is the fraction (0..1) by which the capped delay is randomly shortened.
    """
    if failures < 0:
        raise ValueError("failures must be >= 0")
    # Compare exponents rather than computing factor**failures, which overflows for long outages.
    delay = cap if failures > 64 else min(cap, base * factor**failures)
    # Not security relevant: jitter only spreads retries apart.
    return delay * (1.0 - jitter * random.random())  # noqa: S311


@dataclass(slots=True)
class Backoff:
    """Stateful jittered exponential backoff for one retrying loop (watch reconnects, lease retries)."""

    base: float
    cap: float
    jitter: float = 0.5
    failures: int = 0

    def next_delay(self) -> float:
        """Return the delay for the current failure and count it."""
        delay = exponential_delay(self.failures, base=self.base, cap=self.cap, jitter=self.jitter)
        self.failures += 1
        return delay

    def reset(self) -> None:
        """Forget past failures after a success."""
        self.failures = 0


@dataclass(slots=True)
class ItemBackoff:
    """Per-item exponential backoff, client-go's ``ItemExponentialFailureRateLimiter`` plus jitter.

    Each call to :meth:`when` for an item counts one more failure of that item; :meth:`forget` clears it.
    """

    base: float = 0.005
    cap: float = 60.0
    jitter: float = 0.25
    _failures: dict[Hashable, int] = field(default_factory=dict)

    def when(self, item: Hashable) -> float:
        """Count a failure of ``item`` and return how long to wait before retrying it."""
        failures = self._failures.get(item, 0)
        self._failures[item] = failures + 1
        return exponential_delay(failures, base=self.base, cap=self.cap, jitter=self.jitter)

    def retries(self, item: Hashable) -> int:
        """How many failures of ``item`` have been counted since it was last forgotten."""
        return self._failures.get(item, 0)

    def forget(self, item: Hashable) -> None:
        """Reset ``item``'s failure count (it succeeded or was abandoned)."""
        self._failures.pop(item, None)


@dataclass(slots=True)
class TokenBucket:
    """A token bucket that hands out reservations: ``reserve()`` says how long the caller must wait.

    Tokens refill at ``rate`` per second up to ``burst``. Like Go's ``rate.Limiter.Reserve`` a reservation
    is always granted and may drive the bucket into debt, so concurrent callers queue up fairly instead of
    polling.
    """

    rate: float
    burst: int
    clock: Callable[[], float] = time.monotonic
    _tokens: float = field(init=False)
    _last: float = field(init=False)

    def __post_init__(self) -> None:
        if self.rate <= 0 or self.burst < 1:
            raise ValueError("rate must be > 0 and burst >= 1")
        self._tokens = float(self.burst)
        self._last = self.clock()

    def reserve(self) -> float:
        """Take one token and return the seconds to wait until it is actually available (0 if now)."""
        self._refill()
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate

    def try_take(self) -> bool:
        """Take one token if one is available now; never go into debt."""
        self._refill()
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True

    def _refill(self) -> None:
        now = self.clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.rate)
        self._last = now
