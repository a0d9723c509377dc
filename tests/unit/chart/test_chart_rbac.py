"""Least privilege by construction: the rendered RBAC grants each component exactly what it uses.

``rbac-uses.yaml`` lists every API call of each component's code; for a matrix of installs the
permissions bound to each ServiceAccount must equal that list (nothing missing, nothing extra, no
wildcards). The admission policies that narrow RBAC to "own node" and "own pod" must name the chart's
real ServiceAccounts (upstream's policy names one its plugin does not use).
"""

from __future__ import annotations

from typing import Any

import pytest

from imexdra.api.flags.common import ImexIsolation
from imexdra.controller import rbac as controller_rules
from tests.unit.chart import rbac
from tests.unit.chart.helm import NAMESPACE, merge, nested, render

BASE = "imexdra-service-account"
LEASE = "imexdra-controller"
#: The controller makes each domain's daemon NetworkPolicy by default (docs/tenancy.md, "Network").
POLICIES = frozenset({"daemonNetworkPolicy"})
DRIVER = frozenset({"driverManaged", "cliques", "claims"}) | POLICIES
#: In-use protection is on by default: the controller reads ResourceClaims (docs/in-use-protection.md).
CLAIMS = frozenset({"claims"})
PROTECTION_OFF = nested("resources.computeDomains.inUseProtection", False)
ADDITIONAL = nested(
    "controller.containers.computeDomain.env", [{"name": "ADDITIONAL_NAMESPACES", "value": "old-a"}]
)

INSTALLS: dict[str, tuple[dict[str, Any], frozenset[str], tuple[str, ...]]] = {
    "defaults": ({}, DRIVER, ()),
    "in-use-protection-off": (PROTECTION_OFF, DRIVER - CLAIMS, ()),
    "daemon-network-policy-off": (
        nested("resources.computeDomains.daemonNetworkPolicy", False),
        DRIVER - POLICIES,
        (),
    ),
    "host-managed": ({"featureGates": {"HostManagedIMEX": True}}, CLAIMS, ()),
    "host-managed-protection-off": (
        merge({"featureGates": {"HostManagedIMEX": True}}, PROTECTION_OFF),
        frozenset(),
        (),
    ),
    "host-managed-alias": ({"featureGates": {"HostManagedIMEXDaemon": True}}, CLAIMS, ()),
    "cliques-off": (
        {"featureGates": {"ComputeDomainCliques": False}},
        frozenset({"driverManaged", "noCliques"}) | CLAIMS | POLICIES,
        (),
    ),
    "all-beta-off": (
        {"featureGates": {"AllBeta": False}},
        frozenset({"driverManaged", "noCliques"}) | CLAIMS | POLICIES,
        (),
    ),
    "leader-election": (
        {"controller": {"replicas": 2, "leaderElection": {"enabled": True}}},
        DRIVER | {"leaderElection"},
        (),
    ),
    "gpu-clique-label": (
        nested("kubeletPlugin.containers.computeDomains.gpuCliqueLabelEnabled", True),
        DRIVER | {"gpuCliqueLabel"},
        (),
    ),
    "host-managed-gpu-clique-label": (
        merge(
            {"featureGates": {"HostManagedIMEX": True}},
            nested("kubeletPlugin.containers.computeDomains.gpuCliqueLabelEnabled", True),
        ),
        frozenset({"gpuCliqueLabel"}) | CLAIMS,
        (),
    ),
    "binding-conditions": (
        {"featureGates": {"ComputeDomainBindingConditions": True}},
        DRIVER | {"bindingConditions"},
        (),
    ),
    "binding-conditions-protection-off": (
        merge({"featureGates": {"ComputeDomainBindingConditions": True}}, PROTECTION_OFF),
        DRIVER | {"bindingConditions"},
        (),
    ),
    "binding-conditions-host-managed": (
        {"featureGates": {"ComputeDomainBindingConditions": True, "HostManagedIMEX": True}},
        CLAIMS | {"bindingConditions"},
        (),
    ),
    "additional-namespaces": (ADDITIONAL, DRIVER, ("old-a",)),
    "additional-namespaces-cliques-off": (
        merge(ADDITIONAL, {"featureGates": {"ComputeDomainCliques": False}}),
        frozenset({"driverManaged", "noCliques"}) | CLAIMS | POLICIES,
        ("old-a",),
    ),
}


def install(conditions: frozenset[str], additional: tuple[str, ...] = ()) -> rbac.Install:
    """The install of the rendered chart (release ``imexdra`` in namespace ``imexdra``)."""
    return rbac.Install(
        driver_namespace=NAMESPACE,
        managed_namespaces=(NAMESPACE, *additional),
        base=BASE,
        lease=LEASE,
        conditions=conditions,
    )


@pytest.mark.parametrize("component", rbac.COMPONENTS)
@pytest.mark.parametrize(("values", "conditions", "additional"), INSTALLS.values(), ids=INSTALLS.keys())
def test_granted_equals_used(
    component: str, values: dict[str, Any], conditions: frozenset[str], additional: tuple[str, ...]
) -> None:
    """The permissions bound to the component's ServiceAccount are exactly the ones its code uses."""
    setup = install(conditions, additional)
    rendered = render(values)
    account = rbac.service_account(component, setup)
    granted: set[rbac.Permission] = set()
    for namespace in setup.managed_namespaces:
        granted |= rbac.granted(rendered, namespace, account)
    expected = rbac.expected(component, setup)
    assert sorted(map(str, granted - expected)) == [], "granted but not used"
    assert sorted(map(str, expected - granted)) == [], "used but not granted"


@pytest.mark.parametrize("component", rbac.COMPONENTS)
@pytest.mark.parametrize(("values", "conditions", "additional"), INSTALLS.values(), ids=INSTALLS.keys())
def test_service_accounts_exist_where_bound(
    component: str, values: dict[str, Any], conditions: frozenset[str], additional: tuple[str, ...]
) -> None:
    """A component's ServiceAccount is rendered in each namespace it is bound from, and only if deployed."""
    setup = install(conditions, additional)
    rendered = render(values)
    account = rbac.service_account(component, setup)
    namespaces = {
        obj["metadata"]["namespace"]
        for obj in rendered.of_kind("ServiceAccount")
        if obj["metadata"]["name"] == account
    }
    if not rbac.deployed(component, setup):
        assert namespaces == set()
    elif component == "daemon":
        assert namespaces == set(setup.managed_namespaces)
    else:
        assert namespaces == {NAMESPACE}


@pytest.mark.parametrize("component", rbac.COMPONENTS)
def test_uses_list_is_well_formed(component: str) -> None:
    """Every entry has a known scope and known conditions, says why, and no denied entry is ever used."""
    entry = rbac.component(component)
    for use in entry["uses"]:
        assert use["scope"] in ("cluster", "driverNamespace", "managedNamespaces")
        assert set(use.get("when", ())) <= rbac.CONDITIONS
        assert use["why"].strip()
    everything = install(frozenset(rbac.CONDITIONS))
    used = rbac.expected(component, everything)
    assert used, "a component uses something"
    assert rbac.denied(component, everything) & used == set()


def test_admission_policies_match_the_chart_accounts() -> None:
    """The own-node policy matches the plugin's account; the own-pod policy every daemon account."""
    rendered = render(ADDITIONAL)
    conditions = {
        p["metadata"]["name"]: p["spec"]["matchConditions"][0]["expression"]
        for p in rendered.of_kind("ValidatingAdmissionPolicy")
    }
    assert conditions["imexdra-kubeletplugin-own-node"] == (
        f'request.userInfo.username == "system:serviceaccount:{NAMESPACE}:{BASE}-kubeletplugin"'
    )
    daemon = "compute-domain-daemon-service-account"
    assert conditions["imexdra-compute-domain-daemon-own-pod"] == (
        f'request.userInfo.username in ["system:serviceaccount:{NAMESPACE}:{daemon}",'
        f'"system:serviceaccount:old-a:{daemon}"]'
    )
    bindings = {
        b["spec"]["policyName"]: b["spec"] for b in rendered.of_kind("ValidatingAdmissionPolicyBinding")
    }
    assert set(bindings) == set(conditions)
    assert all(binding["validationActions"] == ["Deny"] for binding in bindings.values())


def test_admission_policies_can_be_disabled() -> None:
    """validatingAdmissionPolicies.enabled=false renders none (for clusters without node-bound tokens)."""
    rendered = render({"validatingAdmissionPolicies": {"enabled": False}})
    assert rendered.of_kind("ValidatingAdmissionPolicy") == []
    assert rendered.of_kind("ValidatingAdmissionPolicyBinding") == []


@pytest.mark.parametrize(
    ("isolation", "protection", "binding", "conditions"),
    [
        (ImexIsolation.DOMAIN, True, False, frozenset({"claims", "leaderElection"})),
        (ImexIsolation.DOMAIN, False, False, frozenset({"leaderElection"})),
        (ImexIsolation.CHANNEL, False, False, frozenset({"claims", "leaderElection"})),
        (ImexIsolation.DOMAIN, False, True, frozenset({"claims", "leaderElection", "bindingConditions"})),
    ],
    ids=[
        "domain-isolation",
        "domain-isolation-protection-off",
        "channel-isolation-protection-off",
        "binding-conditions-protection-off",
    ],
)
def test_controller_rules_module_agrees_with_the_uses_list(
    isolation: ImexIsolation, protection: bool, binding: bool, conditions: frozenset[str]
) -> None:
    """``imexdra.controller.rbac`` (the controller tests' identity) names the same verbs per resource."""
    cluster = controller_rules.cluster_rules(
        isolation, in_use_protection=protection, binding_conditions=binding
    )
    rules = (*cluster, *controller_rules.NAMESPACE_RULES)
    listed = {
        (group, resource, verb)
        for rule in rules
        for group in rule.api_groups
        for resource in rule.resources
        for verb in rule.verbs
    }
    everything = install(conditions | {"driverManaged", "cliques", "daemonNetworkPolicy"})
    used = {(p.group, p.resource, p.verb) for p in rbac.expected("controller", everything)}
    assert listed == used
