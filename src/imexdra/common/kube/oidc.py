"""The ``oidc`` auth-provider of a kubeconfig user: its id-token, refreshed the way kubectl refreshes it.

A user entry ``auth-provider: {name: oidc, config: {...}}`` carries ``id-token`` and, when the identity
provider issued one, ``refresh-token`` with ``idp-issuer-url``, ``client-id`` (``client-secret``,
``idp-certificate-authority`` or ``idp-certificate-authority-data`` optional). The id-token is sent until
its ``exp`` claim (less a margin) has passed or the API server answers 401; then the refresh-token is
exchanged at the issuer's token endpoint (found through ``/.well-known/openid-configuration``) for a new
id-token, and the new tokens are written back into the user's entry of the kubeconfig file, as client-go
does, so the next kubectl or imexdra process starts with them. Without a refresh-token an expired
id-token is an error that says how to log in again (docs/architecture.md §6).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import datetime as dt
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import msgspec
import structlog
import yaml

from imexdra.common.errors import ConfigError, RetryableError
from imexdra.common.files.atomicfile import write_atomic

_log = structlog.get_logger(__name__)
_T = TypeVar("_T")
#: An id-token is refreshed this long before its ``exp``, so a request never carries one that expires
#: in flight.
EXPIRY_MARGIN = dt.timedelta(seconds=10)
_TIMEOUT_SECONDS = 30.0


class OidcRefreshError(RetryableError):
    """The identity provider could not be reached or answered with a server error (retried)."""


@dataclass(frozen=True, slots=True)
class KubeconfigUser:
    """Where a user's entry lives: the kubeconfig file and the user's name in it."""

    path: Path
    name: str


class _Discovery(msgspec.Struct):
    token_endpoint: str


class _TokenResponse(msgspec.Struct):
    id_token: str = ""
    refresh_token: str = ""


class OidcProvider:
    """One oidc auth-provider entry: the current id-token and how to get the next one."""

    def __init__(
        self, config: Mapping[str, Any], abs_file: Callable[[str], Any], origin: KubeconfigUser | None
    ) -> None:
        self._config = {str(key): str(value) for key, value in config.items() if value is not None}
        self._abs_file = abs_file
        self._origin = origin
        if not self._config.get("id-token") and not self.refreshable:
            raise ConfigError(
                "the oidc auth-provider has no id-token; log in with your OIDC tool (e.g. kubectl "
                "oidc-login), or switch the user to its exec plugin form",
                field="kubeconfig",
            )
        if self.lifetime() <= 0 and not self.refreshable:
            expiry = jwt_expiry(self._config["id-token"])
            raise ConfigError(
                f"the oidc id-token in the kubeconfig expired at {expiry.isoformat() if expiry else '?'} "
                "and the entry has no refresh-token; log in again with your OIDC tool, or switch the user "
                "to an exec plugin (e.g. kubelogin) that refreshes it",
                field="kubeconfig",
            )

    @property
    def refreshable(self) -> bool:
        """Whether the entry has what a refresh needs (refresh-token, idp-issuer-url, client-id)."""
        return all(self._config.get(key) for key in ("refresh-token", "idp-issuer-url", "client-id"))

    @property
    def id_token(self) -> str:
        """The current id-token ("" before the first refresh of an entry that has none)."""
        return self._config.get("id-token", "")

    def lifetime(self) -> float:
        """Seconds the current id-token stays usable (inf without an ``exp`` claim, 0 if none or expired)."""
        token = self.id_token
        if not token:
            return 0.0
        expiry = jwt_expiry(token)
        if expiry is None:
            return float("inf")
        return max((expiry - EXPIRY_MARGIN - dt.datetime.now(dt.UTC)).total_seconds(), 0.0)

    async def refresh(self) -> None:
        """Exchange the refresh-token for a new id-token; write the new tokens to the kubeconfig."""
        issuer = self._config["idp-issuer-url"].rstrip("/")
        tls = self._tls()
        discovery = await self._call(tls, "GET", f"{issuer}/.well-known/openid-configuration", None)
        endpoint = _decode(discovery, _Discovery, issuer).token_endpoint
        form = {
            "grant_type": "refresh_token",
            "refresh_token": self._config["refresh-token"],
            "client_id": self._config["client-id"],
        }
        if self._config.get("client-secret"):
            form["client_secret"] = self._config["client-secret"]
        answer = _decode(await self._call(tls, "POST", endpoint, form), _TokenResponse, issuer)
        if not answer.id_token:
            raise ConfigError(
                f"the oidc issuer {issuer} answered the refresh without an id_token; check that the "
                "client asks for the openid scope, or log in again with your OIDC tool",
                field="kubeconfig",
            )
        updates = {"id-token": answer.id_token}
        if answer.refresh_token:
            updates["refresh-token"] = answer.refresh_token
        self._config.update(updates)
        if self._origin is not None:
            try:
                await asyncio.to_thread(_persist, self._origin, updates)
            except (OSError, yaml.YAMLError, ValueError) as error:
                # The new token works for this process; the next one refreshes again.
                _log.warning(
                    "Could not write the refreshed oidc tokens",
                    kubeconfig=str(self._origin.path),
                    error=str(error),
                )

    async def _call(self, tls: ssl.SSLContext, method: str, url: str, form: dict[str, str] | None) -> bytes:
        # The standard library's client, in a thread: two requests per token lifetime, to a server
        # that is not the API server, need neither the API transport's pool nor its metrics, and
        # urllib honours HTTPS_PROXY/NO_PROXY for the issuer as kubectl does (docs/kube-client.md).
        try:
            return await asyncio.to_thread(_fetch, tls, method, url, form)
        except urllib.error.HTTPError as error:
            status, detail = error.code, error.read().decode(errors="replace").strip()[:300]
        except (OSError, ValueError) as error:  # refused, unreachable, timed out, TLS, malformed URL
            raise OidcRefreshError(f"oidc refresh: {method} {url}: {error}") from error
        if status >= 500 or status == 429:
            raise OidcRefreshError(f"oidc refresh: {method} {url}: {status}")
        raise ConfigError(
            f"the oidc issuer refused the refresh ({status}: {detail}); the "
            "refresh-token may have expired or been revoked: log in again with your OIDC tool",
            field="kubeconfig",
        )

    def _tls(self) -> ssl.SSLContext:
        if self._config.get("idp-certificate-authority"):
            authority = self._abs_file(self._config["idp-certificate-authority"])
            return ssl.create_default_context(cafile=str(authority))
        if self._config.get("idp-certificate-authority-data"):
            try:
                pem = base64.b64decode(self._config["idp-certificate-authority-data"]).decode()
            except (binascii.Error, UnicodeDecodeError) as error:
                raise ConfigError(
                    "the oidc idp-certificate-authority-data is not base64-encoded PEM", field="kubeconfig"
                ) from error
            return ssl.create_default_context(cadata=pem)
        return ssl.create_default_context()


def _fetch(tls: ssl.SSLContext, method: str, url: str, form: dict[str, str] | None) -> bytes:
    data = urllib.parse.urlencode(form).encode() if form is not None else None
    request = urllib.request.Request(url, data=data, method=method)  # noqa: S310 - the issuer's https URL
    if data is not None:
        request.add_header("Content-Type", "application/x-www-form-urlencoded")
    with urllib.request.urlopen(request, context=tls, timeout=_TIMEOUT_SECONDS) as response:  # noqa: S310
        body: bytes = response.read()
        return body


def jwt_expiry(token: str) -> dt.datetime | None:
    """The ``exp`` claim of a JWT, unverified (the API server verifies; this only spots a stale token)."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = msgspec.json.decode(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (binascii.Error, msgspec.DecodeError, ValueError):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    return dt.datetime.fromtimestamp(exp, dt.UTC) if isinstance(exp, int | float) else None


def _decode(body: bytes, kind: type[_T], issuer: str) -> _T:
    try:
        return msgspec.json.decode(body, type=kind)
    except msgspec.DecodeError as error:
        raise ConfigError(
            f"the oidc issuer {issuer} answered with something that is not {kind.__name__.strip('_')}: "
            f"{error}; check idp-issuer-url",
            field="kubeconfig",
        ) from error


def _persist(origin: KubeconfigUser, updates: Mapping[str, str]) -> None:
    """Write ``updates`` into the user's ``auth-provider.config`` in its kubeconfig file, atomically."""
    document = yaml.safe_load(origin.path.read_text()) or {}
    for entry in document.get("users") or ():
        if isinstance(entry, dict) and entry.get("name") == origin.name:
            provider = (entry.get("user") or {}).get("auth-provider") or {}
            if isinstance(provider.get("config"), dict):
                provider["config"].update(updates)
                mode = origin.path.stat().st_mode & 0o777
                write_atomic(origin.path, yaml.safe_dump(document, sort_keys=False).encode(), mode=mode)
                return
    raise ValueError(f"user {origin.name!r} with an oidc auth-provider is no longer in the file")
