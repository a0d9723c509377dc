"""The components' API usage (``rbac-uses.yaml``) as permissions, and the permissions a render grants.

``uses()`` is what a component's code does; ``expected()`` turns it into concrete permissions for one
install (driver namespace, managed namespaces, which conditions hold); ``granted()`` collects what the
rendered Roles/ClusterRoles bind to a ServiceAccount. Least privilege means the two are equal.
Integration tests import this module too (``kubectl auth can-i`` over the same permissions).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from tests.unit.chart.helm import CHART_DIR, Rendered

USES_FILE = CHART_DIR / "rbac-uses.yaml"
COMPONENTS = ("controller", "kubeletPlugin", "daemon")
CONDITIONS = frozenset(
    {
        "driverManaged",
        "cliques",
        "noCliques",
        "leaderElection",
        "gpuCliqueLabel",
        "claims",
        "daemonNetworkPolicy",
        "bindingConditions",
    }
)
CLUSTER_SCOPED = frozenset({"nodes", "nodes/status", "resourceslices", "deviceclasses", "clusterroles"})


@dataclass(frozen=True)
class Permission:
    """One verb on one resource, in one namespace (``None``: cluster-wide) and optionally one object."""

    namespace: str | None
    group: str
    resource: str
    verb: str
    resource_name: str | None = None

    def __str__(self) -> str:
        where = self.namespace or "*"
        name = f"/{self.resource_name}" if self.resource_name else ""
        return f"{self.verb} {self.resource}.{self.group or 'core'}{name} in {where}"


@dataclass(frozen=True)
class Install:
    """What varies between installs: namespaces, account base name, Lease name, conditions that hold."""

    driver_namespace: str
    managed_namespaces: tuple[str, ...]
    base: str
    lease: str
    conditions: frozenset[str]

    def __post_init__(self) -> None:
        """Reject unknown condition names (typos would silently drop entries)."""
        unknown = self.conditions - CONDITIONS
        assert not unknown, f"unknown conditions {unknown}"

    def namespaces(self, scope: str) -> Sequence[str | None]:
        """The namespaces a ``scope`` of rbac-uses.yaml stands for."""
        if scope == "cluster":
            return [None]
        if scope == "driverNamespace":
            return [self.driver_namespace]
        if scope == "managedNamespaces":
            return list(self.managed_namespaces)
        raise ValueError(f"unknown scope {scope}")


@functools.cache
def _document() -> Mapping[str, Any]:
    document: Mapping[str, Any] = yaml.safe_load(USES_FILE.read_text())
    return document


def component(name: str) -> Mapping[str, Any]:
    """One component's entry of rbac-uses.yaml."""
    entry: Mapping[str, Any] = _document()["components"][name]
    return entry


def service_account(name: str, install: Install) -> str:
    """The component's ServiceAccount name."""
    return str(component(name)["serviceAccount"]).format(base=install.base)


def deployed(name: str, install: Install) -> bool:
    """Whether the component exists in this install (daemons do not in host-managed mode)."""
    return set(component(name).get("when", ())) <= install.conditions


def _expand(entries: Iterable[Mapping[str, Any]], install: Install, *, honour_when: bool) -> set[Permission]:
    permissions = set()
    for entry in entries:
        if honour_when and not set(entry.get("when", ())) <= install.conditions:
            continue
        name = entry.get("resourceName")
        resource_name = str(name).format(lease=install.lease) if name else None
        for namespace in install.namespaces(entry["scope"]):
            for verb in entry["verbs"]:
                permissions.add(Permission(namespace, entry["group"], entry["resource"], verb, resource_name))
    return permissions


def expected(name: str, install: Install) -> set[Permission]:
    """What the component uses in this install: exactly what its ServiceAccount must be granted."""
    if not deployed(name, install):
        return set()
    return _expand(component(name)["uses"], install, honour_when=True)


def denied(name: str, install: Install) -> set[Permission]:
    """Permissions the component must not have (rbac-uses.yaml ``denied``)."""
    return _expand(component(name).get("denied", ()), install, honour_when=False)


def granted(rendered: Rendered, namespace: str, account: str) -> set[Permission]:
    """Everything the rendered RBAC grants ServiceAccount ``namespace/account``."""
    roles: dict[tuple[str, str | None, str], Any] = {}
    for role in rendered.of_kind("ClusterRole") + rendered.of_kind("Role"):
        meta = role["metadata"]
        roles[(role["kind"], meta.get("namespace"), meta["name"])] = role
    subject = {"kind": "ServiceAccount", "name": account, "namespace": namespace}
    permissions: set[Permission] = set()
    for binding in rendered.of_kind("ClusterRoleBinding") + rendered.of_kind("RoleBinding"):
        if subject not in (binding.get("subjects") or []):
            continue
        scope = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        ref = binding["roleRef"]
        role = roles[(ref["kind"], scope if ref["kind"] == "Role" else None, ref["name"])]
        for rule in role.get("rules") or []:
            for field in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[field], f"wildcard {field} in {role['metadata']['name']}"
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        for resource_name in rule.get("resourceNames") or [None]:
                            permissions.add(Permission(scope, group, resource, verb, resource_name))
    return permissions
