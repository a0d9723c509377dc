"""Kubernetes' object-count quota on ComputeDomains, against the real API server and controller manager.

docs/tenancy.md, "Quotas": a ResourceQuota with ``count/computedomains.resource.nvidia.com`` in a
tenant's namespace is the operator's first tool. The API server's ResourceQuota admission refuses the
create beyond it with 403 Forbidden and a message naming the quota and its numbers, before a
ComputeDomain exists (no controller runs in this module: nothing of ours takes part); once the
kube-controller-manager's quota controller has counted a deleted domain out, a create succeeds again.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from imexdra_sim.builders import compute_domain
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.support.kubectl import apply, get_json
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

COUNT = "count/computedomains.resource.nvidia.com"
QUOTA = "compute-domains"


@pytest.fixture(scope="module")
def namespace(cluster: LocalCluster, compute_domain_crds: None) -> Iterator[str]:
    """A tenant namespace whose ResourceQuota allows two ComputeDomains, counted and enforced."""
    name = f"quota-{secrets.token_hex(3)}"
    cluster.create_namespace(name)
    apply(
        cluster,
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": QUOTA, "namespace": name},
            "spec": {"hard": {COUNT: "2"}},
        },
    )
    # Until the quota controller has filled in status.hard, admission refuses every create ("status unknown").
    wait_until("the quota counted", lambda: used(cluster, name) == "0", timeout=60, interval=0.2)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false")


def used(cluster: LocalCluster, namespace: str) -> str | None:
    status: dict[str, Any] = get_json(cluster, "resourcequota", QUOTA, "-n", namespace).get("status") or {}
    if COUNT not in (status.get("hard") or {}):
        return None
    value: str | None = (status.get("used") or {}).get(COUNT)
    return value


def create(cluster: LocalCluster, namespace: str, name: str) -> tuple[int, str]:
    """``kubectl create`` a ComputeDomain, as a tenant would; its exit code and error output."""
    manifest = yaml.safe_dump(compute_domain(name, namespace))
    result = cluster.kubectl("create", "-f", "-", input=manifest, check=False)
    return result.returncode, result.stderr


def test_count_quota_refuses_the_create_beyond_it(cluster: LocalCluster, namespace: str) -> None:
    """Quota 2: the third create is refused with 403 and the quota's numbers; after a delete it works."""
    assert create(cluster, namespace, "first") == (0, "")
    assert create(cluster, namespace, "second") == (0, "")
    code, error = create(cluster, namespace, "third")
    assert code != 0
    assert "Error from server (Forbidden)" in error
    assert (
        f'computedomains.resource.nvidia.com "third" is forbidden: exceeded quota: {QUOTA}, '
        f"requested: {COUNT}=1, used: {COUNT}=2, limited: {COUNT}=2"
    ) in error
    names = {cd["metadata"]["name"] for cd in get_json(cluster, "computedomains", "-n", namespace)["items"]}
    assert names == {"first", "second"}

    cluster.kubectl("delete", "computedomain", "first", "-n", namespace)
    wait_until("the quota counted the deletion", lambda: used(cluster, namespace) == "1", timeout=90)
    assert create(cluster, namespace, "third") == (0, "")
