"""The Authorization header of a kubeconfig user, for every kind of user a kubeconfig holds.

One implementation serves both HTTP paths to the API server (``common.transport`` and the lightkube
client, through :class:`CredentialsAuth`), so a kubeconfig works the same on each (docs/architecture.md §6):

- ``token`` and ``username``/``password``: fixed headers.
- ``tokenFile`` (in-cluster projected ServiceAccount tokens): re-read once a minute and after a 401, as
  client-go does, since the kubelet rotates the file.
- ``exec`` credential plugins (``client.authentication.k8s.io/v1`` and ``v1beta1``; kubelogin,
  gke-gcloud-auth-plugin, aws-iam-authenticator...): run non-interactively with ``KUBERNETES_EXEC_INFO``
  set, the token kept until its ``expirationTimestamp`` or a 401, one run at a time. A plugin that
  returns a client certificate instead of a token is refused with a message (docs/architecture.md §6).
- ``auth-provider``: ``oidc`` sends its ``id-token`` (refreshing it is left to the tool that wrote it,
  e.g. kubelogin; an expired one is an error that says so); ``gcp`` and ``azure`` were removed from
  client-go in Kubernetes 1.26, and the error names the exec plugin that replaced each.
- client certificates are not a header: ``lightkube``'s ``verify_cluster`` loads them into the TLS context.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import datetime as dt
import os
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from pathlib import Path
from typing import Any

import httpx2
import msgspec
from lightkube.config.models import User, UserExec

from imexdra.common.errors import ConfigError, RetryableError

TOKEN_FILE_REFRESH_SECONDS = 60.0
#: Exec credential versions client-go still speaks (v1alpha1 was removed in Kubernetes 1.24).
EXEC_API_VERSIONS = frozenset({"client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"})
#: A token is refreshed this long before the expiry its plugin announced.
_EXPIRY_MARGIN = dt.timedelta(seconds=10)
_EXEC_TIMEOUT_SECONDS = 60.0
_REMOVED_PROVIDERS = {
    "gcp": "use the gke-gcloud-auth-plugin exec plugin (gcloud components install gke-gcloud-auth-plugin)",
    "azure": "use the kubelogin exec plugin (kubelogin convert-kubeconfig -l azurecli)",
}


class CredentialError(RetryableError):
    """An exec credential plugin failed or printed no usable credential (retried: it may be transient)."""


class _ExecStatus(msgspec.Struct, rename="camel"):
    token: str | None = None
    expiration_timestamp: dt.datetime | None = None
    client_certificate_data: str | None = None


class _ExecCredential(msgspec.Struct, rename="camel"):
    api_version: str = ""
    status: _ExecStatus | None = None


class Credentials:
    """The Authorization header for one kubeconfig user; None for certificate-only or anonymous users."""

    def __init__(self, user: User | None, abs_file: Callable[[str], Any]) -> None:
        self._fixed: str | None = None
        self._token_file: Path | None = None
        self._exec: UserExec | None = None
        self._header: str | None = None
        self._valid_until = -1.0  # monotonic; a header read or run before this is still current
        self._lock = asyncio.Lock()
        if user is None:
            return
        if user.token_file is not None:
            self._token_file = Path(abs_file(user.token_file))
        elif user.token is not None:
            self._fixed = f"Bearer {user.token}"
        elif user.exec is not None:
            if user.exec.apiVersion not in EXEC_API_VERSIONS:
                raise ConfigError(
                    f"exec credential plugin {user.exec.command!r} asks for apiVersion "
                    f"{user.exec.apiVersion!r}; supported: {', '.join(sorted(EXEC_API_VERSIONS))}",
                    field="kubeconfig",
                )
            self._exec = user.exec
        elif user.username and user.password:
            basic = base64.b64encode(f"{user.username}:{user.password}".encode()).decode()
            self._fixed = f"Basic {basic}"
        elif user.auth_provider is not None:
            self._fixed = _auth_provider_header(user.auth_provider)

    @property
    def refreshable(self) -> bool:
        """Whether a 401 may be cured by reading the credential again (token file, exec plugin)."""
        return self._token_file is not None or self._exec is not None

    def invalidate(self) -> None:
        """Forget the current token (after a 401): the next :meth:`header` reads or runs again."""
        self._valid_until = -1.0

    async def header(self) -> str | None:
        """The current header value."""
        if self._fixed is not None or not self.refreshable:
            return self._fixed
        if time.monotonic() < self._valid_until:
            return self._header
        async with self._lock:  # concurrent requests share one read or one plugin run
            if time.monotonic() >= self._valid_until:
                if self._token_file is not None:
                    self._header = f"Bearer {self._read_token_file(self._token_file)}"
                    self._valid_until = time.monotonic() + TOKEN_FILE_REFRESH_SECONDS
                elif self._exec is not None:
                    token, lifetime = await _run_exec(self._exec)
                    self._header = f"Bearer {token}"
                    self._valid_until = time.monotonic() + lifetime
            return self._header

    @staticmethod
    def _read_token_file(path: Path) -> str:
        try:
            return path.read_text().strip()
        except OSError as error:
            raise CredentialError(f"read token file {path}: {error.strerror or error}") from error


class CredentialsAuth(httpx2.Auth):
    """:class:`Credentials` for an httpx client (the lightkube client's), with one retry after a 401."""

    def __init__(self, credentials: Credentials) -> None:
        self._credentials = credentials

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        header = await self._credentials.header()
        if header is not None:
            request.headers["Authorization"] = header
        response = yield request
        if response.status_code == 401 and self._credentials.refreshable:
            self._credentials.invalidate()
            header = await self._credentials.header()
            if header is not None:
                request.headers["Authorization"] = header
            yield request


async def _run_exec(spec: UserExec) -> tuple[str, float]:
    """Run an exec credential plugin; its token and how many seconds it stays valid."""
    env = dict(os.environ)
    env.update((item.name, item.value) for item in spec.env or ())
    # Never interactive: the driver has no terminal, and the CLI must not block on a prompt mid-request.
    env["KUBERNETES_EXEC_INFO"] = msgspec.json.encode(
        {"apiVersion": spec.apiVersion, "kind": "ExecCredential", "spec": {"interactive": False}}
    ).decode()
    command = [spec.command, *(spec.args or ())]
    hint = f" ({spec.installHint.strip()})" if spec.installHint else ""
    try:
        process = await asyncio.create_subprocess_exec(
            *command,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except FileNotFoundError as error:
        raise ConfigError(
            f"exec credential plugin {spec.command!r} not found{hint}", field="kubeconfig"
        ) from error
    try:
        async with asyncio.timeout(_EXEC_TIMEOUT_SECONDS):
            out, err = await process.communicate()
    except TimeoutError as error:
        process.kill()
        await process.wait()
        raise CredentialError(
            f"exec credential plugin {spec.command!r} did not finish in {_EXEC_TIMEOUT_SECONDS:.0f} s"
        ) from error
    if process.returncode != 0:
        detail = err.decode(errors="replace").strip()[-500:]
        raise CredentialError(
            f"exec credential plugin {spec.command!r} exited {process.returncode}: {detail}"
        )
    return _parse_exec_output(spec, out)


def _parse_exec_output(spec: UserExec, out: bytes) -> tuple[str, float]:
    try:
        credential = msgspec.json.decode(out, type=_ExecCredential)
    except msgspec.DecodeError as error:
        raise CredentialError(
            f"exec credential plugin {spec.command!r} printed no ExecCredential: {error}"
        ) from error
    if credential.api_version != spec.apiVersion:
        raise CredentialError(
            f"exec credential plugin {spec.command!r} answered apiVersion {credential.api_version!r}, "
            f"the kubeconfig asked for {spec.apiVersion!r}"
        )
    status = credential.status or _ExecStatus()
    if status.token:
        lifetime = float("inf")
        if status.expiration_timestamp is not None:
            left = status.expiration_timestamp - _EXPIRY_MARGIN - dt.datetime.now(dt.UTC)
            lifetime = max(left.total_seconds(), 0.0)
        return status.token, lifetime
    if status.client_certificate_data:
        raise ConfigError(
            f"exec credential plugin {spec.command!r} returned a client certificate; imexdra uses exec "
            "plugins that return a token (status.token). Configure the plugin for tokens, or put the "
            "certificate in the kubeconfig (client-certificate-data, client-key-data)",
            field="kubeconfig",
        )
    raise CredentialError(
        f"exec credential plugin {spec.command!r} returned neither a token nor a certificate"
    )


def _auth_provider_header(provider: Mapping[str, Any]) -> str:
    name = str(provider.get("name", ""))
    if name in _REMOVED_PROVIDERS:
        raise ConfigError(
            f"the {name} auth-provider was removed from Kubernetes clients in 1.26; "
            f"{_REMOVED_PROVIDERS[name]}",
            field="kubeconfig",
        )
    if name != "oidc":
        raise ConfigError(
            f"auth-provider {name!r} is not supported; use an exec credential plugin", field="kubeconfig"
        )
    token = str((provider.get("config") or {}).get("id-token") or "")
    if not token:
        raise ConfigError(
            "the oidc auth-provider has no id-token; log in with your OIDC tool (e.g. kubectl oidc-login), "
            "or switch the user to its exec plugin form",
            field="kubeconfig",
        )
    expiry = _jwt_expiry(token)
    if expiry is not None and expiry <= dt.datetime.now(dt.UTC):
        raise ConfigError(
            f"the oidc id-token in the kubeconfig expired at {expiry.isoformat()}; refresh it with your "
            "OIDC tool, or switch the user to an exec plugin (e.g. kubelogin) that refreshes it",
            field="kubeconfig",
        )
    return f"Bearer {token}"


def _jwt_expiry(token: str) -> dt.datetime | None:
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
