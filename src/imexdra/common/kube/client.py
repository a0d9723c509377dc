"""The one place that builds Kubernetes API clients and turns their failures into our error tree.

- :func:`load_config` resolves a kubeconfig path, ``$KUBECONFIG`` or the in-cluster service account (in
  that order, like client-go's ``BuildConfigFromFlags``), :func:`tls_context` its TLS;
  ``common.connection`` builds the clients on them.
- :func:`kube_errors` / :func:`wrap_api_error` map API and transport failures onto
  ``RetryableError``/``PermanentError`` subclasses that keep the HTTP status, reason and Retry-After.
- :func:`retry_on_conflict` re-runs a read-modify-write on 409 Conflict with short jittered backoff.
- :func:`http_client` and :func:`collection_path` are the only accessors of lightkube internals (the
  informer needs raw streaming requests that lightkube does not offer, docs/architecture.md §6), and
  ``common.connection`` the only writer of httpx's transports; lightkube is pinned exactly and a unit
  test guards these attributes.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import ssl
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

import httpx2
from lightkube import ALL_NS, ApiError, AsyncClient, KubeConfig, SingleConfig
from lightkube import ConfigError as LightkubeConfigError
from lightkube.config.client_adapter import verify_cluster
from lightkube.config.models import User
from lightkube.core import resource as lkr

from imexdra.common.errors import ConfigError, DriverError, PermanentError, RetryableError
from imexdra.common.machinery.ratelimit import exponential_delay

T = TypeVar("T")

#: Connect fast-fails an unreachable server; the rest bounds one non-watch request end to end.
DEFAULT_TIMEOUT = httpx2.Timeout(30.0, connect=5.0)

# 408/425/429 and 5xx are the server asking us to come back later; 409 is a lost optimistic-concurrency
# race that a fresh read fixes; 410 means "relist". Every other 4xx is a request that will fail the same
# way again (invalid, forbidden, not found, too large).
_RETRYABLE_4XX = frozenset({408, 409, 410, 425, 429})


class ApiStatusError(DriverError):
    """A failed API call; ``code`` is the HTTP status (None for transport failures)."""

    def __init__(
        self, message: str, *, code: int | None, reason: str = "", retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.retry_after = retry_after


class RetryableApiError(ApiStatusError, RetryableError):
    """Conflict, throttling, server error or transport failure: retry with backoff."""


class PermanentApiError(ApiStatusError, PermanentError):
    """A request the server will reject again (validation, forbidden, not found...)."""


def is_retryable_status(code: int) -> bool:
    """Tell whether an HTTP status from the API server is worth retrying."""
    return code >= 500 or code in _RETRYABLE_4XX


def _retry_after(response: httpx2.Response | None) -> float | None:
    value = response.headers.get("Retry-After") if response is not None else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None  # the HTTP-date form; the API server only sends seconds


def wrap_api_error(error: httpx2.HTTPError, action: str) -> ApiStatusError:
    """Turn a lightkube/httpx failure of ``action`` (e.g. "update lease x") into our error type."""
    if isinstance(error, ApiError):
        # lightkube builds ApiErrors for watch ERROR events without a response.
        response: httpx2.Response | None = getattr(error, "response", None)
        code = error.status.code or (response.status_code if response is not None else 500)
        reason, detail = error.status.reason or "", error.status.message or ""
    elif isinstance(error, httpx2.HTTPStatusError):  # a non-JSON error body (proxy, LB)
        code, reason, detail, response = error.response.status_code, "", "", error.response
    else:
        return RetryableApiError(f"{action}: {type(error).__name__}: {error}", code=None)
    message = f"{action}: {code} {reason}: {detail}".rstrip(": ")
    if is_retryable_status(code):
        return RetryableApiError(message, code=code, reason=reason, retry_after=_retry_after(response))
    return PermanentApiError(message, code=code, reason=reason)


@contextmanager
def kube_errors(action: str) -> Iterator[None]:
    """Re-raise API and transport failures inside the block as :class:`ApiStatusError` (from the cause)."""
    try:
        yield
    except (httpx2.HTTPStatusError, httpx2.RequestError) as error:
        raise wrap_api_error(error, action) from error


async def raise_for_status(response: httpx2.Response, action: str) -> None:
    """Raise the :class:`ApiStatusError` for an unsuccessful (possibly streaming) raw response."""
    if response.is_success:
        return
    await response.aread()
    error: httpx2.HTTPStatusError
    try:
        error = ApiError(request=response.request, response=response)
    except ValueError:  # not a Status body
        error = httpx2.HTTPStatusError(response.reason_phrase, request=response.request, response=response)
    raise wrap_api_error(error, action) from error


def _causes(error: BaseException) -> Iterator[BaseException]:
    current: BaseException | None = error
    for _ in range(16):  # cause chains are short; the bound guards against cycles
        if current is None:
            return
        yield current
        current = current.__cause__ or current.__context__


def status_code(error: BaseException) -> int | None:
    """The HTTP status carried by ``error`` or by the first API failure in its cause chain."""
    for cause in _causes(error):
        if isinstance(cause, ApiStatusError):
            return cause.code
        if isinstance(cause, httpx2.HTTPStatusError):
            return cause.response.status_code
    return None


def retry_after(error: BaseException) -> float | None:
    """The server's Retry-After (seconds) carried by ``error`` or its cause chain, if any."""
    for cause in _causes(error):
        if isinstance(cause, ApiStatusError):
            return cause.retry_after
    return None


def is_not_found(error: BaseException) -> bool:
    """Tell whether ``error`` is a 404 from the API server."""
    return status_code(error) == 404


def is_conflict(error: BaseException) -> bool:
    """Tell whether ``error`` is a 409 (stale resourceVersion or AlreadyExists)."""
    return status_code(error) == 409


async def retry_on_conflict(
    attempt: Callable[[], Awaitable[T]],
    *,
    action: str,
    attempts: int = 5,
    base: float = 0.01,
    cap: float = 1.0,
) -> T:
    """Run ``attempt`` (a full read-modify-write) again after each 409, at most ``attempts`` times.

    The callable must re-read the object each time; resending the same stale object cannot succeed.
    Any other failure, and the last conflict, propagates as an :class:`ApiStatusError`.
    """
    for failures in range(attempts):
        try:
            with kube_errors(action):
                return await attempt()
        except RetryableApiError as error:
            if error.code != 409 or failures == attempts - 1:
                raise
        await asyncio.sleep(exponential_delay(failures, base=base, cap=cap, jitter=0.5))
    raise AssertionError("unreachable: the loop returns or raises")


def load_config(kubeconfig: Path | None = None, *, context: str | None = None) -> SingleConfig:
    """Resolve the API endpoint and credentials: ``kubeconfig``, else ``$KUBECONFIG``, else in-cluster.

    ``context`` picks a kubeconfig context other than the current one (kubectl's ``--context``).
    """
    path = kubeconfig or (Path(os.environ["KUBECONFIG"]) if os.environ.get("KUBECONFIG") else None)
    try:
        if path is not None:
            config = KubeConfig.from_file(path).get(context_name=context)
        elif context is not None:
            raise ConfigError(f"context {context!r} needs a kubeconfig; none given and $KUBECONFIG unset")
        elif os.environ.get("KUBERNETES_SERVICE_HOST"):
            config = KubeConfig.from_service_account().get()
        else:
            raise ConfigError("no kubeconfig given, $KUBECONFIG unset and not running in a cluster")
    except LightkubeConfigError as error:
        raise ConfigError(str(error), field="kubeconfig") from error
    if config is None:
        raise ConfigError(f"kubeconfig {path} has no current context", field="kubeconfig")
    return config


def tls_context(config: SingleConfig) -> ssl.SSLContext | None:
    """The TLS context for ``config``'s server (its CA, its client certificate), None for plain HTTP.

    One per connection: both of its clients use it, and an exec plugin's client certificate is loaded
    into it (``common.credentials``).
    """
    if urlsplit(config.cluster.server).scheme != "https":
        return None
    return verify_cluster(config.cluster, config.user or User(), config.abs_file)


def http_client(client: AsyncClient) -> httpx2.AsyncClient:
    """The httpx client inside ``client``: base URL, TLS and auth already configured."""
    inner: httpx2.AsyncClient = client._client._client
    return inner


def collection_path(client: AsyncClient, resource: type[object], namespace: str | None) -> str:
    """URL path of ``resource``'s collection; ``namespace=None`` means all namespaces (or cluster scope)."""
    if not issubclass(resource, lkr.Resource):
        raise TypeError(f"{resource.__name__} is not a lightkube resource class")
    if issubclass(resource, lkr.NamespacedResource):
        scope = namespace if namespace is not None else ALL_NS
    elif namespace is not None:
        raise ValueError(f"{resource.__name__} is cluster-scoped; it has no namespace {namespace!r}")
    else:
        scope = None
    url: str = client._client.prepare_request("list", res=resource, namespace=scope).url
    return url


def microtime(moment: dt.datetime | None = None) -> dt.datetime:
    """``moment`` (default: now, UTC) made safe for a ``MicroTime`` field (Lease and Event times).

    The API server parses MicroTime with exactly six fractional digits, but msgspec omits the fraction
    when it is zero, so such a time would be rejected; shifting it by one microsecond avoids that.
    """
    value = moment if moment is not None else dt.datetime.now(dt.UTC)
    return value if value.microsecond else value.replace(microsecond=1)
