"""Kubeconfigs that authenticate as a ServiceAccount, so code under test runs with the chart's RBAC.

The cluster-admin kubeconfig hides missing permissions; a component started with
``service_account_kubeconfig(cluster, "imexdra", "imexdra-service-account-controller")`` gets exactly
what the chart grants that account. The token comes from the TokenRequest API (``kubectl create
token``), the CA and server from the ``LocalCluster``.

Bind the token to the Node (or Pod) the component acts for when node-scoped checks apply: the API
server then puts ``authentication.kubernetes.io/node-name`` (and ``pod-name``) into the user's extra
info, which the chart's ValidatingAdmissionPolicies use to confine a kubelet plugin to its own node and
a daemon to its own pod, just as they do for the projected token of a real pod.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.localcluster.kubeconfig import write_kubeconfig

DEFAULT_TOKEN_SECONDS = 3600
"""Token lifetime; the API server's minimum is 10 minutes."""

_TOKEN = re.compile(r"[A-Za-z0-9_.-]+")


@dataclass(frozen=True, slots=True)
class BoundObject:
    """The object a token is bound to: it becomes invalid when that object is deleted."""

    kind: Literal["Node", "Pod", "Secret"]
    name: str


@dataclass(frozen=True, slots=True)
class Identity:
    """Who the API server says a kubeconfig authenticates as (``kubectl auth whoami``)."""

    username: str
    groups: tuple[str, ...]
    extra: dict[str, tuple[str, ...]]

    @property
    def node_name(self) -> str | None:
        """The node a bound token names, if any."""
        values = self.extra.get("authentication.kubernetes.io/node-name", ())
        return values[0] if values else None


def service_account_token(
    cluster: LocalCluster,
    namespace: str,
    name: str,
    *,
    bound_to: BoundObject | None = None,
    duration_seconds: int = DEFAULT_TOKEN_SECONDS,
) -> str:
    """Issue a token for ServiceAccount ``namespace/name`` (which must exist)."""
    if duration_seconds < 600:
        raise ValueError("the API server issues tokens for at least 600 seconds")
    args = ["create", "token", name, "-n", namespace, f"--duration={duration_seconds}s"]
    if bound_to is not None:
        args += [f"--bound-object-kind={bound_to.kind}", f"--bound-object-name={bound_to.name}"]
    token = cluster.kubectl(*args).stdout.strip()
    if not _TOKEN.fullmatch(token):
        raise ValueError(f"kubectl create token returned no token for {namespace}/{name}")
    return token


def service_account_kubeconfig(
    cluster: LocalCluster,
    namespace: str,
    name: str,
    *,
    bound_to: BoundObject | None = None,
    duration_seconds: int = DEFAULT_TOKEN_SECONDS,
    path: Path | None = None,
) -> Path:
    """Write a kubeconfig (mode 0600) authenticating as ServiceAccount ``namespace/name``; return its path.

    The default path is ``<run dir>/sa-<namespace>-<name>[-<bound kind>-<bound name>].kubeconfig``.
    """
    token = service_account_token(
        cluster, namespace, name, bound_to=bound_to, duration_seconds=duration_seconds
    )
    if path is None:
        if cluster.run_dir is None:
            raise ValueError("the cluster has no run directory; pass path=")
        suffix = f"-{bound_to.kind.lower()}-{bound_to.name}" if bound_to else ""
        path = cluster.run_dir / f"sa-{namespace}-{name}{suffix}.kubeconfig"
    return write_kubeconfig(
        path,
        server=cluster.apiserver_url,
        ca=cluster.pki.ca.cert,
        user=f"system:serviceaccount:{namespace}:{name}",
        token=token,
        namespace=namespace,
    )


def kubectl_as(
    cluster: LocalCluster, kubeconfig: Path, *args: str, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the cluster's kubectl with ``kubeconfig`` instead of the admin's; the caller checks the outcome."""
    assert cluster.binaries is not None
    return subprocess.run(
        [str(cluster.binaries.path("kubectl")), f"--kubeconfig={kubeconfig}", *args],
        capture_output=True,
        text=True,
        input=input,
        timeout=60,
        check=False,
    )


def whoami(cluster: LocalCluster, kubeconfig: Path) -> Identity:
    """Ask the API server who ``kubeconfig`` authenticates as (SelfSubjectReview)."""
    result = kubectl_as(cluster, kubeconfig, "auth", "whoami", "-o", "json")
    result.check_returncode()
    info = json.loads(result.stdout)["status"]["userInfo"]
    return Identity(
        username=info["username"],
        groups=tuple(info.get("groups", ())),
        extra={key: tuple(values) for key, values in info.get("extra", {}).items()},
    )
