"""The chart's ComputeDomain finalizer policy on the real API server (docs/compatibility.md §3.1).

The chart is rendered as ``helm install`` renders it on a cluster that serves
admissionregistration.k8s.io/v1 MutatingAdmissionPolicy, and only the policy and its binding are
applied. Domains are then created as a server-side dry run: the whole admission chain runs, the
mutated object comes back, nothing is stored, so no controller is needed to remove finalizers and
other tests sharing the cluster see nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from imexdra.api.constants import COMPUTE_DOMAIN_FINALIZER
from imexdra_sim.builders import compute_domain
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.support.waiting import wait_until
from tests.unit.chart.helm import render

RELEASE = "finpol"
NAMESPACE = "finpol-team"
SERVED = ("--api-versions", "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy")
POLICY_KINDS = ("MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding")


def created(cluster: LocalCluster, manifest: dict[str, Any]) -> dict[str, Any]:
    """The domain as the API server would store it (server-side dry run)."""
    result = cluster.kubectl(
        "create", "--dry-run=server", "-o", "json", "-f", "-", input=yaml.safe_dump(manifest)
    )
    stored: dict[str, Any] = json.loads(result.stdout)
    return stored


def finalizers(cluster: LocalCluster, manifest: dict[str, Any]) -> list[str]:
    return list(created(cluster, manifest)["metadata"].get("finalizers", []))


@pytest.fixture(scope="module")
def policy(cluster: LocalCluster, compute_domain_crds: None) -> Iterator[None]:
    """The chart's finalizer policy applied and in effect; removed afterwards."""
    rendered = render(release=RELEASE, namespace=RELEASE, extra=SERVED)
    objects = [obj for obj in rendered.objects if obj["kind"] in POLICY_KINDS]
    assert [obj["kind"] for obj in objects] == list(POLICY_KINDS)
    cluster.create_namespace(NAMESPACE)
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))
    probe = compute_domain("probe", NAMESPACE)
    # Policies load asynchronously: wait until a create comes back mutated.
    wait_until("the finalizer policy in effect", lambda: finalizers(cluster, probe), timeout=30, interval=0.2)
    yield
    for obj in reversed(objects):
        cluster.kubectl("delete", obj["kind"], obj["metadata"]["name"], "--ignore-not-found", check=False)
    cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)


def test_a_domain_is_created_with_its_finalizer(cluster: LocalCluster, policy: None) -> None:
    """A user's domain comes back from its create holding resource.nvidia.com/computeDomain, once."""
    assert finalizers(cluster, compute_domain("born", NAMESPACE)) == [COMPUTE_DOMAIN_FINALIZER]


def test_the_users_own_finalizers_stay(cluster: LocalCluster, policy: None) -> None:
    """Finalizers the user wrote are kept; ours is added once even if the user already wrote it."""
    manifest = compute_domain("kept", NAMESPACE)
    manifest["metadata"]["finalizers"] = ["example.com/keep"]
    assert sorted(finalizers(cluster, manifest)) == sorted(["example.com/keep", COMPUTE_DOMAIN_FINALIZER])
    manifest["metadata"]["finalizers"] = [COMPUTE_DOMAIN_FINALIZER]
    assert finalizers(cluster, manifest) == [COMPUTE_DOMAIN_FINALIZER]


def test_other_kinds_are_left_alone(cluster: LocalCluster, policy: None) -> None:
    """Only ComputeDomains are mutated: a ConfigMap in the same namespace gets no finalizer."""
    config_map = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": NAMESPACE}}
    assert finalizers(cluster, config_map) == []
