"""Classification of errors as permanent or retryable, including wrapped causes."""

import pytest

from imexdra.common.errors import ConfigError, PermanentError, RetryableError, is_permanent


def test_config_error_names_field() -> None:
    """A ConfigError with a field puts the field first in its message and keeps it."""
    err = ConfigError("unknown field", field="spec.bogus")
    assert str(err) == "spec.bogus: unknown field"
    assert err.field == "spec.bogus"
    assert isinstance(err, PermanentError)


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (PermanentError("x"), True),
        (RetryableError("x"), False),
        (ValueError("x"), False),
        (ConfigError("bad"), True),
    ],
    ids=["permanent", "retryable", "foreign", "config"],
)
def test_is_permanent_direct(error: BaseException, expected: bool) -> None:
    """Direct instances are classified by type."""
    assert is_permanent(error) is expected


def test_is_permanent_follows_cause_chain() -> None:
    """A retryable wrapper around a permanent cause is still permanent (upstream errors.As semantics)."""
    try:
        try:
            raise PermanentError("no clique")
        except PermanentError as inner:
            raise RetryableError("prepare failed") from inner
    except RetryableError as outer:
        assert is_permanent(outer)
