"""The least-privilege RBAC rules the controller needs, as data (for the chart and the tests).

Compared with upstream's (docs/compatibility.md §3.1): ``patch`` replaces ``update`` everywhere (the
controller never sends whole objects, see ``writes``), pods are read only in the managed namespaces
instead of cluster-wide, cliques get ``create``/``patch``/``delete`` because the controller is their
only writer, and Events are written through ``events.k8s.io``. Nothing is read with ``get``: the
informers ``list`` and ``watch``; only leader election reads its Lease. ResourceClaims are read only
under channel isolation (the numbers claims hold, docs/channel-isolation.md §4) or in-use protection
(the pods using a domain, docs/in-use-protection.md §3) or with binding conditions, whose status
entries for our devices are the only claim writes (docs/binding-conditions.md). NetworkPolicies are read and
created (never changed; garbage collection deletes them) in the managed namespaces while the controller
makes its daemons' policies (``netpolicy``, the default; the chart grants it with that value only).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from imexdra.api.flags.common import ImexIsolation

_READ = ("list", "watch")


@dataclass(frozen=True, slots=True)
class Rule:
    """One RBAC policy rule."""

    api_groups: tuple[str, ...]
    resources: tuple[str, ...]
    verbs: tuple[str, ...]

    def manifest(self) -> dict[str, Any]:
        """The rule as it appears in a (Cluster)Role."""
        return {
            "apiGroups": list(self.api_groups),
            "resources": list(self.resources),
            "verbs": list(self.verbs),
        }


#: Bound cluster-wide (ClusterRole + ClusterRoleBinding).
CLUSTER_RULES: tuple[Rule, ...] = (
    Rule(("resource.nvidia.com",), ("computedomains",), (*_READ, "patch")),
    Rule(("resource.nvidia.com",), ("computedomains/status",), ("patch",)),
    Rule(("resource.k8s.io",), ("resourceclaimtemplates",), (*_READ, "create", "patch", "delete")),
    Rule(("",), ("nodes",), (*_READ, "patch")),
    Rule(("events.k8s.io",), ("events",), ("create", "patch")),
    Rule(("coordination.k8s.io",), ("leases",), ("get", "create", "update")),
)

#: Bound in the driver namespace and every additional namespace (Role + RoleBinding).
NAMESPACE_RULES: tuple[Rule, ...] = (
    Rule(("apps",), ("daemonsets",), (*_READ, "create", "patch", "delete")),
    Rule(("",), ("pods",), _READ),
    Rule(("resource.nvidia.com",), ("computedomaincliques",), (*_READ, "create", "patch", "delete")),
    Rule(("networking.k8s.io",), ("networkpolicies",), (*_READ, "create")),
)

#: Also bound cluster-wide when the claim projection (``claimholds``) runs: it reads every claim.
CLAIM_RULES: tuple[Rule, ...] = (Rule(("resource.k8s.io",), ("resourceclaims",), _READ),)


@dataclass(frozen=True, slots=True)
class NamedRule(Rule):
    """A rule for named objects only (``resourceNames``)."""

    resource_names: tuple[str, ...] = ()

    def manifest(self) -> dict[str, Any]:
        """The rule as it appears in a (Cluster)Role."""
        return {**Rule.manifest(self), "resourceNames": list(self.resource_names)}


#: Also bound cluster-wide under gate ComputeDomainBindingConditions (``binding``): the controller sets
#: our devices' conditions in claims' ``status.devices``, which Kubernetes authorizes per driver.
BINDING_RULES: tuple[Rule, ...] = (
    Rule(("resource.k8s.io",), ("resourceclaims/status",), ("patch",)),
    NamedRule(
        ("resource.k8s.io",),
        ("resourceclaims/driver",),
        ("arbitrary-node:patch",),
        resource_names=("compute-domain.nvidia.com",),
    ),
)


def cluster_rules(
    isolation: ImexIsolation, *, in_use_protection: bool = True, binding_conditions: bool = False
) -> tuple[Rule, ...]:
    """The cluster-wide rules of an install with ``isolation``, in-use protection and binding conditions."""
    rules = CLUSTER_RULES
    if isolation is ImexIsolation.CHANNEL or in_use_protection or binding_conditions:
        rules = (*rules, *CLAIM_RULES)
    return (*rules, *BINDING_RULES) if binding_conditions else rules
