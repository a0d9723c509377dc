"""What the controller's integration tests stand on: the real binary under real RBAC, and readings.

- ``ControllerUnderTest`` runs the real ``compute-domain-controller`` entry point as a subprocess (so it
  can be SIGKILLed; the simulator's one controller runner, ``imexdra_sim.controllerprocess``),
  authenticated as a ServiceAccount bound to exactly ``imexdra.controller.rbac``'s rules, with its
  metrics and probes on a local port; ``controller_running`` is the fixture body every
  controller module uses (namespaces, identity, start, ready; domains deleted and process stopped after).
- Readings: the controller's and the apiserver's metrics, the objects labelled for a domain.
- ``label_as_daemon`` stands in for a daemon announcing its clique on its own pod; the other
  stand-ins (kubelet plugin, API-only nodes' kubelets) are in ``controller_standins``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from imexdra.api.computedomain import (
    ComputeDomain,
)
from imexdra.api.computedomainclique import ComputeDomainClique
from imexdra.api.constants import CLIQUE_LABEL_KEY, COMPUTE_DOMAIN_LABEL_KEY, TARGET_LABEL_KEY
from imexdra.api.flags.common import ImexIsolation
from imexdra.common.kube.api import PatchType
from imexdra.common.kube.kubeclient import KubeClient, decode
from imexdra.common.kube.models.apps_v1 import DaemonSet
from imexdra.common.kube.models.core_v1 import Node
from imexdra.common.kube.models.resource_v1 import ResourceClaimTemplate
from imexdra.controller import rbac
from imexdra_sim.controllerprocess import ControllerProcess
from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.localcluster.processes import free_port
from imexdra_sim.promtext import Samples, apiserver_metrics, metric
from tests.support.kubectl import apply, get_json

CONTROLLER_BINARY = Path(sys.executable).parent / "compute-domain-controller"
FAKE_IMAGE = "imexdra.test/compute-domain-daemon:fake"
DAEMON_SERVICE_ACCOUNT = "compute-domain-daemon-service-account"


# -- the controller under test ----------------------------------------------------------------------


def install_controller_identity(
    cluster: LocalCluster,
    namespace: str,
    name: str = "imexdra-controller",
    *,
    isolation: ImexIsolation = ImexIsolation.DOMAIN,
) -> Path:
    """A ServiceAccount with only the controller's RBAC rules (for ``isolation``), and a kubeconfig for it."""
    subject = [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]
    apply(
        cluster,
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": f"{name}-{namespace}"},
            "rules": [r.manifest() for r in rbac.cluster_rules(isolation)],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{name}-{namespace}"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": f"{name}-{namespace}",
            },
            "subjects": subject,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": name, "namespace": namespace},
            "rules": [r.manifest() for r in rbac.NAMESPACE_RULES],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": subject,
        },
    )
    token = cluster.kubectl("create", "token", name, "-n", namespace, "--duration=2h").stdout.strip()
    assert cluster.run_dir is not None
    path = cluster.run_dir / f"controller-{namespace}.kubeconfig"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "local",
                "cluster": {
                    "server": cluster.apiserver_url,
                    "certificate-authority": str(cluster.pki.ca.cert),
                },
            }
        ],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": "controller", "context": {"cluster": "local", "user": name}}],
        "current-context": "controller",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def install_driver_namespace(cluster: LocalCluster, namespace: str) -> None:
    """The driver namespace with the daemon ServiceAccount (the chart creates both)."""
    cluster.create_namespace(namespace)
    apply(
        cluster,
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": DAEMON_SERVICE_ACCOUNT, "namespace": namespace},
        },
    )


@dataclass
class ControllerUnderTest(ControllerProcess):
    """The real ``compute-domain-controller`` as a child process (``imexdra_sim.controllerprocess``)."""

    cluster: LocalCluster
    kubeconfig: Path
    namespace: str
    name: str = "controller-0"
    gates: str = ""
    #: Read at every start: a test may change them between a stop and a restart.
    extra_args: tuple[str, ...] = ()
    port: int = field(default_factory=free_port)
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        assert self.cluster.run_dir is not None
        self.log_path = self.cluster.run_dir / "logs" / f"{self.name}.log"

    def argv(self) -> list[str]:
        return [
            str(CONTROLLER_BINARY),
            f"--kubeconfig={self.kubeconfig}",
            f"--pod-name={self.name}",
            f"--namespace={self.namespace}",
            f"--image-name={FAKE_IMAGE}",
            "--log-verbosity-cd-daemon=2",
            f"--http-endpoint=127.0.0.1:{self.port}",
            f"--feature-gates={self.gates}",
            "--kube-api-qps=100",
            "--kube-api-burst=200",
            "--logging-format=json",
            *self.extra_args,
        ]

    def environment(self) -> dict[str, str]:
        # The flags say everything: the test runner's own KUBECONFIG and friends must not leak in.
        return {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "FEATURE_GATES", "NAMESPACE")}


@contextlib.asynccontextmanager
async def controller_running(
    cluster: LocalCluster,
    driver_ns: str,
    user_ns: str,
    name: str,
    *,
    gates: str = "",
    extra_args: tuple[str, ...] = (),
    namespaces: bool = True,
    clean_up: bool = True,
) -> AsyncIterator[ControllerUnderTest]:
    """The controller under test, ready, as an account with only its RBAC: every module's fixture.

    ``namespaces``: create the driver namespace (with the daemon ServiceAccount) and ``user_ns`` first,
    and delete them last; off for a module whose stand-ins need them before the controller runs.
    ``clean_up``: delete every domain of ``user_ns`` before stopping (through the controller, which
    removes the finalizers); off for a module whose cluster goes away with everything on it.
    """
    if namespaces:
        install_driver_namespace(cluster, driver_ns)
        cluster.create_namespace(user_ns)
    kubeconfig = install_controller_identity(cluster, driver_ns)
    process = ControllerUnderTest(
        cluster, kubeconfig, driver_ns, name=name, gates=gates, extra_args=extra_args
    ).start()
    try:
        await process.wait_ready()
        yield process
        if clean_up:
            cluster.kubectl("delete", "computedomains", "--all", "-n", user_ns, "--timeout=90s", check=False)
    finally:
        process.stop()
    if namespaces and clean_up:
        cluster.kubectl("delete", "namespace", user_ns, driver_ns, "--wait=false")


def apiserver_requests(cluster: LocalCluster) -> Samples:
    """The apiserver's own ``apiserver_request_total`` samples (read with the admin client)."""
    return {k: v for k, v in apiserver_metrics(cluster).items() if k[0] == "apiserver_request_total"}


def request_delta(
    before: Samples,
    after: Samples,
    **labels: str,
) -> float:
    """How many requests matching ``labels`` the apiserver served between two readings."""
    return metric(after, "apiserver_request_total", **labels) - metric(
        before, "apiserver_request_total", **labels
    )


# -- objects -----------------------------------------------------------------------------------------


def events_of(cluster: LocalCluster, namespace: str, uid: str) -> list[dict[str, Any]]:
    """The Events of ``namespace`` about the object with ``uid``."""
    items = get_json(cluster, "events", "-n", namespace)["items"]
    return [e for e in items if e["involvedObject"].get("uid") == uid]


def foreign_template(name: str, namespace: str) -> dict[str, Any]:
    """A ResourceClaimTemplate no ComputeDomain owns (a name clash for the domain that wants ``name``)."""
    request = {"name": "x", "exactly": {"deviceClassName": "none"}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }


def labelled(
    cluster: LocalCluster, kind: str, uid: str, *, all_namespaces: bool = True
) -> list[dict[str, Any]]:
    """Objects of ``kind`` carrying the domain label ``uid``."""
    scope = ["-A"] if all_namespaces else []
    items: list[dict[str, Any]] = get_json(
        cluster, kind, *scope, "-l", f"resource.nvidia.com/computeDomain={uid}"
    )["items"]
    return items


def leftovers(cluster: LocalCluster, uid: str) -> dict[str, list[str]]:
    """Everything still carrying the domain's label, by kind (empty lists when nothing leaked)."""
    kinds = ("resourceclaimtemplates", "daemonsets", "computedomaincliques", "nodes")
    return {kind: [item["metadata"]["name"] for item in labelled(cluster, kind, uid)] for kind in kinds}


async def label_as_daemon(kube: KubeClient, pod: str, namespace: str, clique_id: str) -> None:
    """What a daemon does first thing: announce its clique ID on its own pod."""
    from imexdra.common.kube.models.core_v1 import Pod

    await kube.patch(
        Pod,
        pod,
        {"metadata": {"labels": {CLIQUE_LABEL_KEY: clique_id}}},
        namespace=namespace,
        patch_type=PatchType.MERGE,
    )


class TeardownWatch:
    """The steps of one domain's teardown as watches see them, in etcd order.

    Records ``(resourceVersion, step)`` for: ``<kind> <name> deleting`` (deletionTimestamp first seen),
    ``<kind> <name> gone`` (DELETED) and ``node <name> unlabelled`` (the node left the domain-label
    selector). resourceVersions are etcd revisions, one counter for every resource of the cluster,
    so they order events of different kinds. Use as ``async with``; entering returns once every watch
    has seen the objects that exist now.
    """

    def __init__(self, kube: KubeClient, uid: str, *, user_namespace: str, driver_namespace: str) -> None:
        label: dict[str, Any] = {COMPUTE_DOMAIN_LABEL_KEY: uid}
        self._uid = uid
        self._kube = kube
        # (step name, kind, namespace, label selector) of each watch.
        self._watches: list[tuple[str, type[Any], str | None, dict[str, Any] | None]] = [
            ("ComputeDomain", ComputeDomain, user_namespace, None),
            ("ResourceClaimTemplate", ResourceClaimTemplate, "*", label),
            ("DaemonSet", DaemonSet, driver_namespace, label),
            ("ComputeDomainClique", ComputeDomainClique, driver_namespace, label),
            ("node", Node, None, label),
        ]
        self.steps: list[tuple[int, str]] = []
        self._tasks: list[asyncio.Task[None]] = []

    async def __aenter__(self) -> TeardownWatch:
        armed = [asyncio.Event() for _ in self._watches]
        self._tasks = [
            asyncio.create_task(self._follow(watch, ready))
            for watch, ready in zip(self._watches, armed, strict=True)
        ]
        await asyncio.wait_for(asyncio.gather(*(ready.wait() for ready in armed)), timeout=30)
        return self

    async def __aexit__(self, *exc: object | TracebackType) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _follow(
        self, watch: tuple[str, type[Any], str | None, dict[str, Any] | None], armed: asyncio.Event
    ) -> None:
        kind, res, namespace, labels = watch
        deleting: set[str] = set()
        async with self._kube.watch(res, namespace=namespace, labels=labels, bookmarks=False) as events:
            async for event in events:
                armed.set()
                if event.type not in ("ADDED", "MODIFIED", "DELETED"):
                    continue
                meta = decode(event, res).metadata
                if kind == "ComputeDomain" and meta.uid != self._uid:
                    continue
                where = f"{kind} {meta.name}"
                if kind == "ResourceClaimTemplate":
                    where = f"{(meta.labels or {}).get(TARGET_LABEL_KEY, '')} {where}"
                rv = int(meta.resourceVersion)
                if event.type == "DELETED":
                    self.steps.append((rv, f"{where} unlabelled" if kind == "node" else f"{where} gone"))
                elif meta.deletionTimestamp is not None and where not in deleting:
                    deleting.add(where)
                    self.steps.append((rv, f"{where} deleting"))

    def when(self, prefix: str, outcome: str = "gone") -> list[int]:
        """The resourceVersions of the steps ``<prefix>... <outcome>`` (gone, deleting or unlabelled)."""
        return [rv for rv, step in self.steps if step.startswith(prefix) and step.endswith(f" {outcome}")]
