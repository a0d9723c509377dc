"""API failure classification and naming, conflict retries and config resolution."""

import datetime as dt
import pathlib

import msgspec
import pytest

from imexdra.common.errors import ConfigError, PermanentError, RetryableError, is_permanent
from imexdra.common.kube.client import (
    ApiStatusError,
    PermanentApiError,
    RetryableApiError,
    is_conflict,
    is_not_found,
    kube_errors,
    load_config,
    microtime,
    retry_after,
    retry_on_conflict,
    status_code,
)
from imexdra.common.kube.transport import _status_error

KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: ctx, context: {cluster: c, user: u, namespace: team}}]
current-context: ctx
"""


def api_error(code: int, reason: str = "", *, headers: dict[str, str] | None = None) -> ApiStatusError:
    """The error the transport raises for a JSON Status answer of ``code`` to "update configmap ns/a"."""
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": "boom", "reason": reason}
    lowered = {k.lower(): v for k, v in (headers or {}).items()}
    return _status_error("update configmap ns/a", code, lowered, msgspec.json.encode(body))


@pytest.mark.parametrize(
    ("code", "reason", "retryable"),
    [
        (409, "Conflict", True),
        (409, "AlreadyExists", True),
        (429, "TooManyRequests", True),
        (500, "InternalError", True),
        (503, "ServiceUnavailable", True),
        (504, "Timeout", True),
        (410, "Expired", True),
        (401, "Unauthorized", False),
        (403, "Forbidden", False),
        (400, "BadRequest", False),
        (404, "NotFound", False),
        (422, "Invalid", False),
    ],
    ids=lambda v: str(v),
)
def test_api_errors_are_classified_by_status(code: int, reason: str, retryable: bool) -> None:
    """Throttling, conflicts and server errors retry; validation, not-found and authn/authz are permanent
    (client-go's model; the controller's writes retry 401/403 themselves)."""
    wrapped = api_error(code, reason)
    assert isinstance(wrapped, RetryableError if retryable else PermanentError)
    assert (wrapped.code, wrapped.reason) == (code, reason)
    assert str(wrapped) == f"update configmap ns/a: {code} {reason}: boom"


def test_retry_after_seconds_are_kept() -> None:
    """An APF 429 keeps its Retry-After so the work queue can honour it."""
    wrapped = api_error(429, headers={"Retry-After": "30"})
    assert isinstance(wrapped, RetryableApiError)
    assert wrapped.retry_after == 30.0
    assert retry_after(wrapped) == 30.0


def test_non_json_error_body_still_classified() -> None:
    """A proxy's plain-text 502 is still classified by its status, the text kept as the message."""
    wrapped = _status_error("list", 502, {}, b"bad gateway")
    assert isinstance(wrapped, RetryableApiError) and wrapped.code == 502
    assert str(wrapped) == "list: 502 : bad gateway"


def test_kube_errors_renames_and_chains() -> None:
    """The context manager re-raises under the caller's name with the original as cause."""
    with pytest.raises(PermanentApiError) as info, kube_errors("get configmap ns/a"):
        raise api_error(404, "NotFound")
    assert str(info.value) == "get configmap ns/a: 404 NotFound: boom"
    assert isinstance(info.value.__cause__, PermanentApiError)
    assert is_not_found(info.value) and not is_conflict(info.value)
    assert is_permanent(info.value)


def test_status_code_follows_cause_chain() -> None:
    """A domain error raised from an API failure still exposes the HTTP status."""
    try:
        try:
            raise RetryableApiError("conflict", code=409)
        except RetryableApiError as inner:
            raise RetryableError("reconcile failed") from inner
    except RetryableError as outer:
        assert status_code(outer) == 409
        assert is_conflict(outer)
    assert status_code(ValueError("x")) is None


async def test_retry_on_conflict_retries_only_conflicts() -> None:
    """Conflicts are retried with a fresh attempt; success returns the value."""
    calls = 0

    async def attempt() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise api_error(409, "Conflict")
        return "ok"

    assert await retry_on_conflict(attempt, action="update", base=0.001) == "ok"
    assert calls == 3


async def test_retry_on_conflict_gives_up_after_attempts() -> None:
    """Persistent conflicts surface as a retryable API error after the allowed attempts."""
    calls = 0

    async def attempt() -> None:
        nonlocal calls
        calls += 1
        raise api_error(409, "Conflict")

    with pytest.raises(RetryableApiError) as info:
        await retry_on_conflict(attempt, action="update", attempts=4, base=0.001)
    assert calls == 4 and info.value.code == 409


async def test_retry_on_conflict_does_not_retry_other_errors() -> None:
    """A non-conflict failure propagates at once."""
    calls = 0

    async def attempt() -> None:
        nonlocal calls
        calls += 1
        raise api_error(422, "Invalid")

    with pytest.raises(PermanentApiError):
        await retry_on_conflict(attempt, action="update", base=0.001)
    assert calls == 1


def test_load_config_prefers_explicit_path(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An explicit kubeconfig wins over $KUBECONFIG."""
    explicit = tmp_path / "explicit"
    explicit.write_text(KUBECONFIG)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "does-not-exist"))
    config = load_config(explicit)
    assert config.cluster.server == "https://127.0.0.1:6443"
    assert config.namespace == "team"


def test_load_config_from_env(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a path, $KUBECONFIG is used."""
    path = tmp_path / "kc"
    path.write_text(KUBECONFIG)
    monkeypatch.setenv("KUBECONFIG", str(path))
    assert load_config().cluster.server == "https://127.0.0.1:6443"


def test_load_config_without_any_source(monkeypatch: pytest.MonkeyPatch) -> None:
    """No kubeconfig and no in-cluster environment is a clear configuration error."""
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ConfigError, match="not running in a cluster"):
        load_config()


def test_load_config_missing_file(tmp_path: pathlib.Path) -> None:
    """A kubeconfig path that does not exist names the kubeconfig field."""
    with pytest.raises(ConfigError, match="kubeconfig"):
        load_config(tmp_path / "missing")


@pytest.mark.parametrize(
    ("moment", "wire"),
    [
        (dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC), b'"2026-01-02T03:04:05.000001Z"'),
        (dt.datetime(2026, 1, 2, 3, 4, 5, 250000, tzinfo=dt.UTC), b'"2026-01-02T03:04:05.250000Z"'),
    ],
    ids=["whole-second", "fraction"],
)
def test_microtime_always_encodes_six_digits(moment: dt.datetime, wire: bytes) -> None:
    """MicroTime values always reach the wire with the six fractional digits the API server requires."""
    assert msgspec.json.encode(microtime(moment)) == wire


def test_microtime_defaults_to_now_utc() -> None:
    """Without an argument, microtime is the current UTC time."""
    now = microtime()
    assert now.tzinfo is dt.UTC
    assert abs((dt.datetime.now(dt.UTC) - now).total_seconds()) < 5
