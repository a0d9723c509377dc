"""Install the chart's identities (ServiceAccounts, RBAC, admission policies) on a local cluster.

For integration tests that run a component as the chart would, without its Deployment or DaemonSet:

    rbac = install_chart_rbac(cluster, release="ctl-test", namespace="ctl-test")
    kubeconfig = rbac.kubeconfig("controller")                        # the chart's controller account
    kubeconfig = rbac.kubeconfig("kubeletPlugin", node="node-0")      # bound to node-0 (own-node policy)
    ...
    rbac.uninstall()

A component that works with these credentials works with the chart's least-privilege RBAC.
Cluster-scoped objects are named after the release, so several installs can share one cluster.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.localcluster.credentials import BoundObject, service_account_kubeconfig
from tests.unit.chart import rbac
from tests.unit.chart.helm import Object, Rendered, render

IDENTITY_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")


@dataclass
class ChartRBAC:
    """One installed set of the chart's identities."""

    cluster: LocalCluster
    release: str
    namespace: str
    rendered: Rendered
    objects: list[Object]

    def service_account(self, component: str) -> str:
        """The ServiceAccount of ``component`` (``controller``, ``kubeletPlugin`` or ``daemon``)."""
        workloads = {"controller": "Deployment", "kubeletPlugin": "DaemonSet"}
        if component not in workloads:
            return str(rbac.component(component)["serviceAccount"])
        (workload,) = self.rendered.of_kind(workloads[component])
        return str(workload["spec"]["template"]["spec"]["serviceAccountName"])

    def kubeconfig(
        self, component: str, *, node: str | None = None, pod: str | None = None, namespace: str | None = None
    ) -> Path:
        """A kubeconfig for the component's account, its token bound to ``node`` or ``pod`` if given."""
        bound = BoundObject("Node", node) if node else BoundObject("Pod", pod) if pod else None
        return service_account_kubeconfig(
            self.cluster, namespace or self.namespace, self.service_account(component), bound_to=bound
        )

    def uninstall(self) -> None:
        """Delete everything this install created (namespaces are the caller's)."""
        for obj in reversed(self.objects):
            meta = obj["metadata"]
            scope = ["-n", meta["namespace"]] if "namespace" in meta else []
            self.cluster.kubectl(
                "delete", obj["kind"], meta["name"], *scope, "--ignore-not-found", "--wait=false", check=False
            )


def install_chart_rbac(
    cluster: LocalCluster,
    *,
    release: str,
    namespace: str,
    values: Mapping[str, Any] | None = None,
    policies: bool = True,
    timeout: float = 30.0,
) -> ChartRBAC:
    """Render the chart and apply its identities (and admission policies) to ``cluster``.

    Namespaces the objects live in are created when missing. Returns once every admission policy has
    been type-checked by the API server (its status names the current generation).
    """
    rendered = render(values, release=release, namespace=namespace)
    kinds = IDENTITY_KINDS + (POLICY_KINDS if policies else ())
    objects = [obj for obj in rendered.objects if obj["kind"] in kinds]
    existing = set(cluster.kubectl("get", "namespaces", "-o", "name").stdout.split())
    for name in sorted({obj["metadata"]["namespace"] for obj in objects if "namespace" in obj["metadata"]}):
        if f"namespace/{name}" not in existing:
            cluster.create_namespace(name)
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))
    deadline = time.monotonic() + timeout
    for policy in (obj for obj in objects if obj["kind"] == "ValidatingAdmissionPolicy"):
        name = policy["metadata"]["name"]
        while True:
            status = cluster.kubectl(
                "get", "validatingadmissionpolicy", name, "-o", "jsonpath={.status.observedGeneration}"
            ).stdout
            if status:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"ValidatingAdmissionPolicy {name} was not type-checked in {timeout}s")
            time.sleep(0.2)
    return ChartRBAC(cluster, release, namespace, rendered, objects)
