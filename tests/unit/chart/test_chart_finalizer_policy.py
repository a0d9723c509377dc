"""The chart's ComputeDomain finalizer policy as ``helm template`` renders it (docs/compatibility.md §3.1).

Rendered only where the cluster serves admissionregistration.k8s.io/v1 MutatingAdmissionPolicy (helm
reads that from discovery on install; ``--api-versions`` says it here), and only when enabled. What it
does on a real API server is tests/integration/test_chart_finalizer_policy.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from imexdra.api.constants import COMPUTE_DOMAIN_FINALIZER
from tests.unit.chart.helm import render

SERVED = ("--api-versions", "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy")
POLICY = "imexdra-computedomain-finalizer"
KINDS = ("MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding")


def policy_objects(values: dict[str, Any] | None = None, extra: tuple[str, ...] = SERVED) -> list[Any]:
    rendered = render(values, extra=extra)
    return [obj for kind in KINDS for obj in rendered.of_kind(kind)]


def test_the_policy_adds_our_finalizer_to_created_domains_only() -> None:
    """CREATE of computedomains only, failure ignored (the controller adds it anyway), bound to itself."""
    policy, binding = policy_objects()
    assert policy["metadata"]["name"] == binding["metadata"]["name"] == POLICY
    assert binding["spec"] == {"policyName": POLICY}
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Ignore"
    assert spec["matchConstraints"]["resourceRules"] == [
        {
            "apiGroups": ["resource.nvidia.com"],
            "apiVersions": ["*"],
            "operations": ["CREATE"],
            "resources": ["computedomains"],
        }
    ]
    (mutation,) = spec["mutations"]
    assert mutation["patchType"] == "ApplyConfiguration"
    assert f'finalizers: ["{COMPUTE_DOMAIN_FINALIZER}"]' in mutation["applyConfiguration"]["expression"]


@pytest.mark.parametrize(
    ("values", "extra"),
    [
        pytest.param(None, (), id="api-not-served"),
        pytest.param({"mutatingAdmissionPolicies": {"enabled": False}}, SERVED, id="disabled"),
        pytest.param({"resources": {"computeDomains": {"enabled": False}}}, SERVED, id="no-compute-domains"),
    ],
)
def test_no_policy_where_it_cannot_or_should_not_run(
    values: dict[str, Any] | None, extra: tuple[str, ...]
) -> None:
    """Older clusters, an operator's opt-out and a chart without ComputeDomains render no policy."""
    assert policy_objects(values, extra) == []


def test_host_managed_keeps_the_policy() -> None:
    """HostManagedIMEX domains carry the same finalizer (the controller adds it in both modes)."""
    assert len(policy_objects({"featureGates": {"HostManagedIMEX": True}})) == 2
