"""Kubeconfig and TLS for the API client, and the one error model of every API call.

- :func:`load_config` resolves a kubeconfig path, ``$KUBECONFIG`` or the in-cluster service account (in
  that order, like client-go's ``BuildConfigFromFlags``; parsed by ``common.kube.kubeconfig``),
  :func:`tls_context` its TLS (the cluster's CA or the system's, the user's client certificate);
  ``common.kube.connection`` builds the clients on them.
- :class:`ApiStatusError` and its ``RetryableError``/``PermanentError`` subclasses are the one error
  model of every API call (``common.kube.transport`` raises them, keeping the HTTP status, reason and
  Retry-After); :func:`kube_errors` names a failure with the caller's words.
- :func:`retry_on_conflict` re-runs a read-modify-write on 409 Conflict with short jittered backoff.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import datetime as dt
import os
import ssl
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar
from urllib.parse import urlsplit

from imexdra.common.errors import ConfigError, DriverError, PermanentError, RetryableError
from imexdra.common.kube.kubeconfig import Kubeconfig, SingleConfig, User, service_account
from imexdra.common.pacing.ratelimit import exponential_delay

T = TypeVar("T")

# 408/425/429 and 5xx are the server asking us to come back later; 409 is a lost optimistic-concurrency
# race that a fresh read fixes; 410 means "relist". Every other 4xx is a request that will fail the same
# way again (invalid, forbidden, not found, too large).
_RETRYABLE_4XX = frozenset({408, 409, 410, 425, 429})


class ApiStatusError(DriverError):
    """A failed API call; ``code`` is the HTTP status (None for transport failures)."""

    def __init__(
        self,
        message: str,
        *,
        code: int | None,
        reason: str = "",
        retry_after: float | None = None,
        action: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.retry_after = retry_after
        #: The request's name at the head of ``message`` (``"<action>: ..."``), when the error knows it.
        self.action = action

    def relabelled(self, action: str) -> ApiStatusError:
        """The same failure named ``action`` (``kube_errors``: the caller's words for the request)."""
        if self.action is None or self.action == action or not str(self).startswith(f"{self.action}: "):
            return self
        rest = str(self)[len(self.action) + 2 :]
        return type(self)(
            f"{action}: {rest}",
            code=self.code,
            reason=self.reason,
            retry_after=self.retry_after,
            action=action,
        )


class RetryableApiError(ApiStatusError, RetryableError):
    """Conflict, throttling, server error or transport failure: retry with backoff."""


class PermanentApiError(ApiStatusError, PermanentError):
    """A request the server will reject again (validation, forbidden, not found...)."""


def is_retryable_status(code: int) -> bool:
    """Tell whether an HTTP status from the API server is worth retrying."""
    return code >= 500 or code in _RETRYABLE_4XX


@contextmanager
def kube_errors(action: str) -> Iterator[None]:
    """Name API and transport failures inside the block ``action`` (re-raised as :class:`ApiStatusError`)."""
    try:
        yield
    except ApiStatusError as error:
        renamed = error.relabelled(action)
        if renamed is error:
            raise
        raise renamed from error


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
    if path is not None:
        return Kubeconfig.from_file(path).get(context)
    if context is not None:
        raise ConfigError(f"context {context!r} needs a kubeconfig; none given and $KUBECONFIG unset")
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return service_account()
    raise ConfigError("no kubeconfig given, $KUBECONFIG unset and not running in a cluster")


def tls_context(config: SingleConfig) -> ssl.SSLContext | None:
    """The TLS context for ``config``'s server (its CA, its client certificate), None for plain HTTP.

    One per connection: both of its clients use it, and an exec plugin's client certificate is loaded
    into it (``common.kube.credentials``).
    """
    if urlsplit(config.cluster.server).scheme != "https":
        return None
    cluster, user = config.cluster, config.user
    if cluster.certificate_auth:
        context = ssl.create_default_context(cafile=config.abs_file(cluster.certificate_auth))
    elif cluster.certificate_auth_data:
        context = ssl.create_default_context(cadata=_pem(cluster.certificate_auth_data))
    elif cluster.insecure:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    else:
        context = ssl.create_default_context()  # the system's CAs, or $SSL_CERT_FILE/$SSL_CERT_DIR's
    if user is not None and (user.client_cert or user.client_cert_data):
        _load_client_certificate(context, user, config.abs_file)
    return context


def _pem(data: str) -> str:
    """A kubeconfig ``*-data`` field (base64 of PEM) as PEM text."""
    try:
        return base64.b64decode(data).decode()
    except (binascii.Error, UnicodeDecodeError) as error:
        raise ConfigError(f"not base64-encoded PEM: {error}", field="kubeconfig") from error


def _load_client_certificate(context: ssl.SSLContext, user: User, abs_file: Callable[[str], str]) -> None:
    """Load the user's client certificate and key (files, or ``*-data`` written to a private temp dir).

    ``ssl`` loads a certificate chain from files only; the files are removed once it is loaded.
    """
    if not user.client_cert_data and not user.client_key_data:
        context.load_cert_chain(abs_file(user.client_cert or ""), abs_file(user.client_key or ""))
        return
    with tempfile.TemporaryDirectory(prefix="imexdra-kubeconfig-") as scratch:
        cert = Path(scratch) / "client.crt"
        key = Path(scratch) / "client.key"
        cert.write_text(_pem(user.client_cert_data) if user.client_cert_data else "")
        key.write_text(_pem(user.client_key_data) if user.client_key_data else "")
        context.load_cert_chain(
            cert if user.client_cert_data else abs_file(user.client_cert or ""),
            key if user.client_key_data else abs_file(user.client_key or ""),
        )


def microtime(moment: dt.datetime | None = None) -> dt.datetime:
    """``moment`` (default: now, UTC) made safe for a ``MicroTime`` field (Lease and Event times).

    The API server parses MicroTime with exactly six fractional digits, but msgspec omits the fraction
    when it is zero, so such a time would be rejected; shifting it by one microsecond avoids that.
    """
    value = moment if moment is not None else dt.datetime.now(dt.UTC)
    return value if value.microsecond else value.replace(microsecond=1)
