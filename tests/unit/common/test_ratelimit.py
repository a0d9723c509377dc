"""Backoff growth, caps and jitter bounds; token-bucket reservations and non-borrowing takes."""

import pytest

from imexdra.common.pacing.ratelimit import Backoff, ItemBackoff, TokenBucket, exponential_delay


class FakeClock:
    """A settable monotonic clock."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("failures", "expected"),
    [(0, 0.005), (1, 0.01), (2, 0.02), (10, 5.12), (14, 60.0), (64, 60.0), (10_000, 60.0)],
    ids=["first", "second", "third", "tenth", "capped", "huge-exponent", "no-overflow"],
)
def test_exponential_delay_doubles_until_cap(failures: int, expected: float) -> None:
    """Without jitter the delay is base·2^failures, never above the cap, even for absurd counts."""
    assert exponential_delay(failures, base=0.005, cap=60.0) == pytest.approx(expected)


def test_exponential_delay_jitter_only_shortens() -> None:
    """Jitter spreads delays below the capped value and never above it."""
    delays = [exponential_delay(20, base=1.0, cap=10.0, jitter=0.25) for _ in range(500)]
    assert all(7.5 <= d <= 10.0 for d in delays)
    assert max(delays) - min(delays) > 1.0  # actually spread, not constant


def test_exponential_delay_rejects_negative_failures() -> None:
    """A negative failure count is a programming error."""
    with pytest.raises(ValueError, match="failures"):
        exponential_delay(-1, base=1.0, cap=2.0)


def test_backoff_grows_and_resets() -> None:
    """Each call counts a failure; reset starts from the base again."""
    backoff = Backoff(base=1.0, cap=8.0, jitter=0.0)
    assert [backoff.next_delay() for _ in range(5)] == [1.0, 2.0, 4.0, 8.0, 8.0]
    backoff.reset()
    assert backoff.next_delay() == 1.0


def test_item_backoff_tracks_items_separately_and_forgets() -> None:
    """Per-item failure counts are independent and forget clears one item only."""
    limiter = ItemBackoff(base=0.01, cap=1.0, jitter=0.0)
    assert [limiter.when("a") for _ in range(3)] == pytest.approx([0.01, 0.02, 0.04])
    assert limiter.when("b") == pytest.approx(0.01)
    assert (limiter.retries("a"), limiter.retries("b")) == (3, 1)
    limiter.forget("a")
    assert limiter.retries("a") == 0
    assert limiter.when("a") == pytest.approx(0.01)
    assert limiter.retries("b") == 1


def test_token_bucket_burst_then_debt_then_refill() -> None:
    """The burst is free; further reservations wait in line; time refills the bucket."""
    clock = FakeClock()
    bucket = TokenBucket(rate=10.0, burst=3, clock=clock)
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.reserve() == pytest.approx(0.1)
    assert bucket.reserve() == pytest.approx(0.2)
    clock.now += 1.0
    assert bucket.reserve() == 0.0


def test_token_bucket_try_take_never_borrows() -> None:
    """try_take refuses when empty without pushing the bucket into debt."""
    clock = FakeClock()
    bucket = TokenBucket(rate=1.0, burst=2, clock=clock)
    assert [bucket.try_take() for _ in range(4)] == [True, True, False, False]
    clock.now += 1.0
    assert bucket.try_take() is True
    assert bucket.try_take() is False


@pytest.mark.parametrize(
    ("rate", "burst"), [(0.0, 1), (-1.0, 1), (1.0, 0)], ids=["zero-rate", "neg", "no-burst"]
)
def test_token_bucket_rejects_nonsense(rate: float, burst: int) -> None:
    """A bucket that could never hand out a token is refused."""
    with pytest.raises(ValueError, match="rate"):
        TokenBucket(rate=rate, burst=burst)
