"""The kubeconfig as typed data: its file, its contexts, and the in-cluster service account.

:class:`Kubeconfig` reads a file's clusters, users, contexts and current-context; :meth:`Kubeconfig.get`
selects one context as a :class:`SingleConfig` (the cluster, the user, the file for relative paths);
:func:`service_account` is the same for a pod's mounted service account. The field names are the
kubeconfig's (``certificate-authority-data``, ``tokenFile``, ``auth-provider``, ``proxy-url``...);
``common.kube.client`` resolves which source to use, ``common.kube.credentials`` turns a user into an
Authorization header and ``common.kube.proxy`` reads the proxy. Any unreadable or inconsistent file is
a ``ConfigError`` (docs/kube-client.md).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, NamedTuple

import msgspec
import yaml

from imexdra.common.errors import ConfigError

#: The in-cluster service account's mount (token, ca.crt, namespace), as client-go reads it.
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class Context(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A context: which cluster, as which user, in which namespace by default."""

    cluster: str
    user: str | None = None
    namespace: str | None = None


class NameValue(msgspec.Struct, kw_only=True):
    """One environment variable of an exec plugin."""

    name: str
    value: str


class UserExec(msgspec.Struct, kw_only=True, omit_defaults=True):
    """An exec credential plugin: the command that prints an ExecCredential."""

    apiVersion: str  # noqa: N815 (the kubeconfig's name)
    command: str
    env: list[NameValue] | None = None
    args: list[str] | None = None
    installHint: str | None = None  # noqa: N815


class User(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A user's credentials: token, tokenFile, exec, basic auth or auth-provider; a client certificate."""

    exec: UserExec | None = None
    username: str | None = None
    password: str | None = None
    token: str | None = None
    token_file: str | None = msgspec.field(name="tokenFile", default=None)
    auth_provider: dict[str, Any] | None = msgspec.field(name="auth-provider", default=None)
    client_cert: str | None = msgspec.field(name="client-certificate", default=None)
    client_cert_data: str | None = msgspec.field(name="client-certificate-data", default=None)
    client_key: str | None = msgspec.field(name="client-key", default=None)
    client_key_data: str | None = msgspec.field(name="client-key-data", default=None)


class Cluster(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A cluster: its server, how to trust it, and the proxy to reach it through."""

    server: str = "http://localhost:8080"
    certificate_auth: str | None = msgspec.field(name="certificate-authority", default=None)
    certificate_auth_data: str | None = msgspec.field(name="certificate-authority-data", default=None)
    insecure: bool = msgspec.field(name="insecure-skip-tls-verify", default=False)
    proxy_url: str | None = msgspec.field(name="proxy-url", default=None)


class SingleConfig(NamedTuple):
    """One selected context: its cluster and user, and the file they came from (None in-cluster)."""

    context_name: str
    context: Context
    cluster: Cluster
    user: User | None = None
    fname: Path | None = None

    @property
    def namespace(self) -> str:
        """The context's namespace, ``default`` when it names none."""
        return self.context.namespace or "default"

    def abs_file(self, name: str) -> str:
        """``name`` as an absolute path: a relative one is relative to the kubeconfig's directory."""
        if Path(name).is_absolute():
            return name
        if self.fname is None:
            raise ConfigError(f"{name} is relative, but kubeconfig path unknown")
        return str(self.fname.parent / name)


class _Named(msgspec.Struct):
    name: str


class _NamedCluster(_Named):
    cluster: Cluster


class _NamedUser(_Named):
    user: User


class _NamedContext(_Named):
    context: Context


class _File(msgspec.Struct, rename={"current_context": "current-context"}):
    clusters: list[_NamedCluster]
    contexts: list[_NamedContext]
    users: list[_NamedUser] | None = None
    current_context: str | None = None


class Kubeconfig(msgspec.Struct, kw_only=True):
    """A kubeconfig's clusters, users and contexts by name, and its current context."""

    clusters: dict[str, Cluster]
    contexts: dict[str, Context]
    users: dict[str, User]
    current_context: str | None = None
    fname: Path | None = None

    @classmethod
    def from_file(cls, path: Path) -> Kubeconfig:
        """Read the kubeconfig at ``path`` (``~`` expanded)."""
        given, path = path, path.expanduser()
        if not path.is_file():
            raise ConfigError(f"Configuration file {given} not found", field="kubeconfig")
        try:
            raw = yaml.safe_load(path.read_text())
            parsed = msgspec.convert(raw, _File)
        except (OSError, yaml.YAMLError, msgspec.ValidationError) as error:
            raise ConfigError(f"kubeconfig {path}: {error}", field="kubeconfig") from error
        return cls(
            clusters={entry.name: entry.cluster for entry in parsed.clusters},
            contexts={entry.name: entry.context for entry in parsed.contexts},
            users={entry.name: entry.user for entry in parsed.users or ()},
            current_context=parsed.current_context,
            fname=path,
        )

    def get(self, context_name: str | None = None) -> SingleConfig:
        """The context ``context_name``, by default the current one."""
        name = context_name if context_name is not None else self.current_context
        if name is None:
            raise ConfigError("No current context set and no default provided", field="kubeconfig")
        context = self.contexts.get(name)
        if context is None:
            raise ConfigError(f"Context '{name}' not found", field="kubeconfig")
        cluster = self.clusters.get(context.cluster)
        if cluster is None:
            raise ConfigError(
                f"Context '{name}' names cluster '{context.cluster}', which is not defined",
                field="kubeconfig",
            )
        user = None
        if context.user:
            user = self.users.get(context.user)
            if user is None:
                raise ConfigError(
                    f"Context '{name}' names user '{context.user}', which is not defined", field="kubeconfig"
                )
        return SingleConfig(context_name=name, context=context, cluster=cluster, user=user, fname=self.fname)


def service_account(account: Path = SERVICE_ACCOUNT) -> SingleConfig:
    """The in-cluster config: ``$KUBERNETES_SERVICE_HOST``/``_PORT``, the mounted CA, token and namespace.

    The token is read again from its file whenever it is used (``common.kube.credentials``): the
    kubelet rotates it.
    """
    token_file = account / "token"
    try:
        token = token_file.read_text()
        namespace = (account / "namespace").read_text()
    except FileNotFoundError as error:
        raise ConfigError(str(error), field="kubeconfig") from error
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:  # client-go's ErrNotInCluster, and what would work instead
        raise ConfigError(
            "not running in a cluster: KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be set "
            "(the kubelet sets them in every pod); outside a pod pass --kubeconfig or set KUBECONFIG",
            field="kubeconfig",
        )
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    return SingleConfig(
        context_name="default",
        context=Context(cluster="default", user="default", namespace=namespace),
        cluster=Cluster(server=f"https://{host}:{port}", certificate_auth=str(account / "ca.crt")),
        user=User(token=token, token_file=str(token_file)),
    )
