"""The credentials of a kubeconfig user, for every kind of user a kubeconfig holds.

The transport (``common.kube.transport``) asks :class:`Credentials` for its ``Authorization`` header
and, after a 401, for a fresh one (docs/architecture.md §6):

- ``token`` and ``username``/``password``: fixed headers.
- ``tokenFile`` (in-cluster projected ServiceAccount tokens): re-read once a minute and after a 401, as
  client-go does, since the kubelet rotates the file.
- ``exec`` credential plugins (``client.authentication.k8s.io/v1`` and ``v1beta1``; kubelogin,
  gke-gcloud-auth-plugin, aws-iam-authenticator, tsh...): run non-interactively with
  ``KUBERNETES_EXEC_INFO`` set, the answer kept until its ``expirationTimestamp`` or a 401, one run at a
  time. A token becomes the header; a client certificate and key are loaded into the connection's TLS
  context, and :attr:`Credentials.certificate_generation` tells the clients to drop connections made
  with the previous one (client-go closes them too).
- ``auth-provider``: ``oidc`` (``common.kube.oidc``: the id-token, refreshed with the refresh-token when it
  expires or is refused); ``gcp`` and ``azure`` were removed from client-go in Kubernetes 1.26, and the
  error names the exec plugin that replaced each.
- client certificates in the kubeconfig are not a header: ``common.kube.client.tls_context`` loads them.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import os
import ssl
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from imexdra.common.errors import ConfigError, RetryableError
from imexdra.common.kube.kubeconfig import User, UserExec
from imexdra.common.kube.oidc import EXPIRY_MARGIN, KubeconfigUser, OidcProvider

TOKEN_FILE_REFRESH_SECONDS = 60.0
#: Exec credential versions client-go still speaks (v1alpha1 was removed in Kubernetes 1.24).
EXEC_API_VERSIONS = frozenset({"client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"})
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
    client_key_data: str | None = None


class _ExecCredential(msgspec.Struct, rename="camel"):
    api_version: str = ""
    status: _ExecStatus | None = None


@dataclass(frozen=True, slots=True)
class _ExecAnswer:
    token: str | None
    certificate: tuple[str, str] | None  # PEM certificate chain and key
    lifetime: float  # seconds


class Credentials:
    """What one kubeconfig user proves itself with: an Authorization header, a client certificate, or both.

    ``tls`` is the connection's TLS context (None for a plain-HTTP server); an exec plugin's client
    certificate is loaded into it. ``origin`` is where the user's entry lives, so a refreshed oidc token
    can be written back.
    """

    def __init__(
        self,
        user: User | None,
        abs_file: Callable[[str], Any],
        *,
        tls: ssl.SSLContext | None = None,
        origin: KubeconfigUser | None = None,
    ) -> None:
        self._fixed: str | None = None
        self._token_file: Path | None = None
        self._exec: UserExec | None = None
        self._oidc: OidcProvider | None = None
        self._tls = tls
        self._header: str | None = None
        self._valid_until = -1.0  # monotonic; a header read or run before this is still current
        self._lock = asyncio.Lock()
        #: Incremented each time an exec plugin's client certificate is loaded into ``tls``: connections
        #: opened before carry the old one.
        self.certificate_generation = 0
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
            self._oidc = _auth_provider(user.auth_provider, abs_file, origin)
            if self._oidc.lifetime() > 0:
                self._header = f"Bearer {self._oidc.id_token}"
                self._valid_until = time.monotonic() + self._oidc.lifetime()

    @property
    def refreshable(self) -> bool:
        """Whether a 401 may be cured by getting the credential again (token file, exec, oidc refresh)."""
        return (
            self._token_file is not None
            or self._exec is not None
            or (self._oidc is not None and self._oidc.refreshable)
        )

    def invalidate(self) -> None:
        """Forget the current credential (after a 401): the next :meth:`header` gets a new one."""
        self._valid_until = -1.0

    async def header(self) -> str | None:
        """The current header value (getting a new credential first if the current one is stale)."""
        if self._fixed is not None:
            return self._fixed
        if time.monotonic() < self._valid_until:
            return self._header
        async with self._lock:  # concurrent requests share one read, plugin run or refresh
            if time.monotonic() >= self._valid_until:
                self._header, lifetime = await self._fresh()
                self._valid_until = time.monotonic() + lifetime
            return self._header

    async def _fresh(self) -> tuple[str | None, float]:
        if self._token_file is not None:
            return f"Bearer {_read_token_file(self._token_file)}", TOKEN_FILE_REFRESH_SECONDS
        if self._exec is not None:
            answer = await _run_exec(self._exec)
            if answer.certificate is not None:
                self._load_certificate(self._exec.command, *answer.certificate)
            return (f"Bearer {answer.token}" if answer.token else None), answer.lifetime
        if self._oidc is not None:
            if self._oidc.refreshable:
                await self._oidc.refresh()
            # Without a refresh-token the same id-token goes out again; its 401 reaches the caller.
            return f"Bearer {self._oidc.id_token}", max(self._oidc.lifetime(), 1.0)
        return None, float("inf")

    def _load_certificate(self, command: str, certificate: str, key: str) -> None:
        if self._tls is None:
            raise ConfigError(
                f"exec credential plugin {command!r} returned a client certificate, but the server "
                "is not https: use https, or a plugin that returns a token",
                field="kubeconfig",
            )
        # ssl loads certificates only from files: a private directory, removed once they are loaded.
        with tempfile.TemporaryDirectory(prefix="imexdra-exec-") as directory:
            chain, private = Path(directory, "tls.crt"), Path(directory, "tls.key")
            chain.write_text(certificate)
            private.write_text(key)
            try:
                self._tls.load_cert_chain(chain, private)
            except ssl.SSLError as error:
                raise CredentialError(
                    f"exec credential plugin {command!r} returned a client certificate and key that "
                    f"do not load: {error}"
                ) from error
        self.certificate_generation += 1


def _read_token_file(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError as error:
        raise CredentialError(f"read token file {path}: {error.strerror or error}") from error


async def _run_exec(spec: UserExec) -> _ExecAnswer:
    """Run an exec credential plugin; what it returned and how many seconds that stays valid."""
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


def _parse_exec_output(spec: UserExec, out: bytes) -> _ExecAnswer:
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
    if bool(status.client_certificate_data) != bool(status.client_key_data):
        raise CredentialError(
            f"exec credential plugin {spec.command!r} returned a client certificate without its key "
            "or a key without its certificate (status.clientCertificateData, status.clientKeyData)"
        )
    certificate = None
    if status.client_certificate_data and status.client_key_data:
        certificate = (status.client_certificate_data, status.client_key_data)
    if not status.token and certificate is None:
        raise CredentialError(
            f"exec credential plugin {spec.command!r} returned neither a token nor a certificate"
        )
    lifetime = float("inf")
    if status.expiration_timestamp is not None:
        left = status.expiration_timestamp - EXPIRY_MARGIN - dt.datetime.now(dt.UTC)
        lifetime = max(left.total_seconds(), 0.0)
    return _ExecAnswer(status.token or None, certificate, lifetime)


def _auth_provider(
    provider: Mapping[str, Any], abs_file: Callable[[str], Any], origin: KubeconfigUser | None
) -> OidcProvider:
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
    return OidcProvider(provider.get("config") or {}, abs_file, origin)
