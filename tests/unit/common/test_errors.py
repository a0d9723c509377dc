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


def test_the_outermost_of_our_errors_decides() -> None:
    """A retryable wrapper around a permanent cause is retryable (a 403 the controller retries), a
    permanent wrapper around a retryable one permanent; foreign exceptions on the way are skipped."""
    try:
        try:
            raise PermanentError("403 Forbidden")
        except PermanentError as inner:
            raise RetryableError("create daemonset") from inner
    except RetryableError as outer:
        assert not is_permanent(outer)
        try:
            raise RuntimeError("a foreign wrapper") from outer
        except RuntimeError as foreign:
            assert not is_permanent(foreign)
    try:
        try:
            raise PermanentError("bad")
        except PermanentError as inner:
            raise RuntimeError("a foreign wrapper") from inner
    except RuntimeError as foreign:
        assert is_permanent(foreign)
    try:
        try:
            raise RetryableError("timeout")
        except RetryableError as inner:
            raise PermanentError("no clique") from inner
    except PermanentError as outer:
        assert is_permanent(outer)
