"""API failure classification and wrapping, conflict retries, config resolution and the lightkube seams."""

import datetime as dt
import pathlib

import httpx2
import msgspec
import pytest
from lightkube import ApiError, AsyncClient
from lightkube.resources.core_v1 import ConfigMap, Node

from imexdra.common.errors import ConfigError, PermanentError, RetryableError, is_permanent
from imexdra.common.kube.client import (
    PermanentApiError,
    RetryableApiError,
    collection_path,
    is_conflict,
    is_not_found,
    kube_errors,
    load_config,
    microtime,
    retry_after,
    retry_on_conflict,
    status_code,
    wrap_api_error,
)

KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: ctx, context: {cluster: c, user: u, namespace: team}}]
current-context: ctx
"""


def api_error(code: int, reason: str = "", *, headers: dict[str, str] | None = None) -> ApiError:
    """A lightkube ApiError as the client raises it for a JSON Status response."""
    request = httpx2.Request("PUT", "https://k8s.test/api/v1/namespaces/ns/configmaps/a")
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": "boom",
        "reason": reason,
        "code": code,
    }
    response = httpx2.Response(code, json=body, headers=headers or {}, request=request)
    return ApiError(request=request, response=response)


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
        (400, "BadRequest", False),
        (403, "Forbidden", False),
        (404, "NotFound", False),
        (422, "Invalid", False),
    ],
    ids=lambda v: str(v),
)
def test_wrap_api_error_classifies_by_status(code: int, reason: str, retryable: bool) -> None:
    """Throttling, conflicts and server errors retry; validation, authz and not-found are permanent."""
    wrapped = wrap_api_error(api_error(code, reason), "update configmap ns/a")
    assert isinstance(wrapped, RetryableError if retryable else PermanentError)
    assert (wrapped.code, wrapped.reason) == (code, reason)
    assert str(wrapped) == f"update configmap ns/a: {code} {reason}: boom"


def test_wrap_keeps_retry_after_seconds() -> None:
    """An APF 429 keeps its Retry-After so the work queue can honour it."""
    wrapped = wrap_api_error(api_error(429, headers={"Retry-After": "30"}), "patch")
    assert isinstance(wrapped, RetryableApiError)
    assert wrapped.retry_after == 30.0
    assert retry_after(wrapped) == 30.0


@pytest.mark.parametrize(
    "error",
    [httpx2.ConnectError("refused"), httpx2.ReadTimeout("slow"), httpx2.RemoteProtocolError("eof")],
    ids=["connect", "timeout", "protocol"],
)
def test_transport_failures_are_retryable_without_code(error: httpx2.HTTPError) -> None:
    """Network trouble is retryable and carries no HTTP status."""
    wrapped = wrap_api_error(error, "get lease")
    assert isinstance(wrapped, RetryableApiError)
    assert wrapped.code is None


def test_non_json_error_body_still_classified() -> None:
    """A proxy's plain-text 502 (not turned into an ApiError by lightkube) is still wrapped by status."""
    request = httpx2.Request("GET", "https://k8s.test/api")
    error = httpx2.HTTPStatusError(
        "bad gateway", request=request, response=httpx2.Response(502, request=request)
    )
    wrapped = wrap_api_error(error, "list")
    assert isinstance(wrapped, RetryableApiError) and wrapped.code == 502


def test_kube_errors_wraps_and_chains() -> None:
    """The context manager re-raises as our type with the library error as cause; status helpers see it."""
    with pytest.raises(PermanentApiError) as info, kube_errors("get configmap ns/a"):
        raise api_error(404, "NotFound")
    assert isinstance(info.value.__cause__, ApiError)
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
    ("resource", "namespace", "path"),
    [
        (ConfigMap, "ns1", "api/v1/namespaces/ns1/configmaps"),
        (ConfigMap, None, "api/v1/configmaps"),
        (Node, None, "api/v1/nodes"),
    ],
    ids=["one-namespace", "all-namespaces", "cluster-scoped"],
)
async def test_collection_path(
    tmp_path: pathlib.Path, resource: type, namespace: str | None, path: str
) -> None:
    """Collection URLs cover one namespace, all namespaces and cluster-scoped kinds."""
    kc = tmp_path / "kc"
    kc.write_text(KUBECONFIG)
    client = AsyncClient(config=load_config(kc))
    assert collection_path(client, resource, namespace) == path
    with pytest.raises(ValueError, match="cluster-scoped"):
        collection_path(client, Node, "ns1")
    with pytest.raises(TypeError):
        collection_path(client, dict, None)
    await client.close()


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
