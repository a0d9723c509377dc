"""In-use protection of a ComputeDomain (docs/in-use-protection.md), the controller binary on the real
control plane.

The real ``compute-domain-controller`` runs host-managed as an account with only its RBAC (which now
includes reading ResourceClaims). A claim of the domain's channel is allocated and reserved for a real
pod the way the scheduler would (status written by hand: no kubelet plugin runs here, and the pod is
handed to a scheduler that does not exist, so it never starts and the default scheduler, which would
deallocate the claim of a pod it cannot place, leaves it alone); the resourceclaim controller of the
real kube-controller-manager keeps that reservation while the pod exists and clears it when it goes.

Aspects covered: deleting the domain while the pod holds the channel keeps the domain Terminating with
its workload template, and a Warning event ``InUse`` names the pod; deleting the pod lets the teardown
finish; with ``--compute-domain-in-use-protection=false`` the same deletion completes at once, as
upstream's; a claim of another namespace naming the domain (a tenant squatting on it) does not hold it
(docs/tenancy.md).
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest

from imexdra.api.computedomain import ComputeDomain
from imexdra.api.constants import DRIVER_NAME
from imexdra.common.kube.kubeclient import KubeClient
from imexdra_sim.builders import channel_claim, channel_config, compute_domain_model
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.integration.controller_harness import ControllerUnderTest, controller_running, events_of, labelled
from tests.support.builders import channel_pod
from tests.support.kubectl import apply, get_json, patch_status
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

SUFFIX = secrets.token_hex(3)
DRIVER_NS = f"imexdra-inuse-{SUFFIX}"
USER_NS = f"cd-inuse-{SUFFIX}"
HOST_MANAGED = "HostManagedIMEX=true"
NO_SCHEDULER = "imexdra-no-such-scheduler"
"""The pods' ``schedulerName``: nothing schedules them, so they stay Pending with their reservation."""


@pytest.fixture
async def protected(cluster: LocalCluster, compute_domain_crds: None) -> AsyncIterator[ControllerUnderTest]:
    """A host-managed controller with in-use protection (its default)."""
    async with controller_running(cluster, DRIVER_NS, USER_NS, f"inuse-{SUFFIX}", gates=HOST_MANAGED) as c:
        yield c


@pytest.fixture
async def protected_victim(
    cluster: LocalCluster, compute_domain_crds: None
) -> AsyncIterator[ControllerUnderTest]:
    """A host-managed controller with in-use protection, for a victim team's namespace of its own."""
    async with controller_running(
        cluster, f"{DRIVER_NS}-v", f"{USER_NS}-v", f"inuse-v-{SUFFIX}", gates=HOST_MANAGED
    ) as c:
        yield c


@pytest.fixture
async def unprotected(cluster: LocalCluster, compute_domain_crds: None) -> AsyncIterator[ControllerUnderTest]:
    """A host-managed controller with upstream's immediate teardown."""
    async with controller_running(
        cluster,
        f"{DRIVER_NS}-off",
        f"{USER_NS}-off",
        f"inuse-off-{SUFFIX}",
        gates=HOST_MANAGED,
        extra_args=("--compute-domain-in-use-protection=false",),
    ) as c:
        yield c


async def ready_domain(kube: KubeClient, name: str, namespace: str) -> str:
    """Create a domain, wait for Ready; its UID."""
    await kube.create(compute_domain_model(name, namespace))

    async def ready() -> ComputeDomain | None:
        cd = await kube.get(ComputeDomain, name, namespace=namespace)
        return cd if cd.status is not None and cd.status.status == "Ready" else None

    cd: ComputeDomain = await eventually(f"{name} Ready", ready, within=30)
    assert cd.metadata is not None and cd.metadata.uid
    return cd.metadata.uid


def claim_in_use(cluster: LocalCluster, namespace: str, domain_uid: str, pod: str) -> None:
    """A claim on the domain's channel 0, allocated and reserved for ``pod`` (which is created too)."""
    name = f"{pod}-channel"
    apply(cluster, channel_claim(namespace, name, domain_uid))
    manifest = channel_pod(pod, namespace, name, existing_claim=True)
    manifest["spec"]["schedulerName"] = NO_SCHEDULER
    apply(cluster, manifest)
    pod_uid = get_json(cluster, "pod", pod, "-n", namespace)["metadata"]["uid"]
    allocation = {
        "devices": {
            "results": [
                {"request": "channel", "driver": DRIVER_NAME, "pool": "node-0", "device": "channel-0"}
            ],
            "config": [{"source": "FromClaim", **channel_config(domain_uid)}],
        }
    }
    reserved = [{"resource": "pods", "name": pod, "uid": pod_uid}]
    patch_status(
        cluster,
        "resourceclaim",
        name,
        namespace,
        {"status": {"allocation": allocation, "reservedFor": reserved}},
    )


def domain_gone(cluster: LocalCluster, name: str, namespace: str) -> bool:
    """Whether the domain has disappeared from the API."""
    found = cluster.kubectl("get", "computedomain", name, "-n", namespace, "--ignore-not-found", "-o", "name")
    return not found.stdout.strip()


def in_use_events(cluster: LocalCluster, namespace: str, uid: str) -> list[dict[str, Any]]:
    """The domain's ``InUse`` Warning events."""
    return [e for e in events_of(cluster, namespace, uid) if e["reason"] == "InUse"]


async def test_a_domain_in_use_waits_for_its_pods(
    cluster: LocalCluster, kube: KubeClient, protected: ControllerUnderTest
) -> None:
    """Deleted under a reserved claim: Terminating, template kept, InUse names the pod; pod gone → gone."""
    uid = await ready_domain(kube, "held", USER_NS)
    claim_in_use(cluster, USER_NS, uid, "worker-0")
    cluster.kubectl("delete", "computedomain", "held", "-n", USER_NS, "--wait=false")

    [event] = await eventually("InUse event", lambda: in_use_events(cluster, USER_NS, uid), within=30)
    assert event["type"] == "Warning"
    assert f"{USER_NS}/worker-0" in event["message"] and "1 pod(s)" in event["message"]
    domain = get_json(cluster, "computedomain", "held", "-n", USER_NS)
    assert domain["metadata"]["deletionTimestamp"]
    (template,) = labelled(cluster, "resourceclaimtemplates", uid)
    assert "deletionTimestamp" not in template["metadata"]

    cluster.kubectl("delete", "pod", "worker-0", "-n", USER_NS, "--wait=false")
    await eventually("held gone", lambda: domain_gone(cluster, "held", USER_NS), within=60)
    assert labelled(cluster, "resourceclaimtemplates", uid) == []


async def test_a_claim_of_another_namespace_does_not_hold_the_domain(
    cluster: LocalCluster, kube: KubeClient, protected_victim: ControllerUnderTest
) -> None:
    """A tenant's reserved claim naming the domain's UID: the domain still goes at once, no InUse event."""
    namespace = f"{USER_NS}-v"
    uid = await ready_domain(kube, "victim", namespace)
    tenant = f"{USER_NS}-tenant"
    cluster.create_namespace(tenant)
    try:
        claim_in_use(cluster, tenant, uid, "squatter")
        cluster.kubectl("delete", "computedomain", "victim", "-n", namespace, "--wait=false")
        await eventually("victim gone", lambda: domain_gone(cluster, "victim", namespace), within=30)
        assert in_use_events(cluster, namespace, uid) == []
        claim = get_json(cluster, "resourceclaim", "squatter-channel", "-n", tenant)
        assert claim["status"]["reservedFor"][0]["name"] == "squatter"  # it was held all along
    finally:
        cluster.kubectl("delete", "namespace", tenant, "--wait=false")


async def test_protection_off_tears_down_at_once(
    cluster: LocalCluster, kube: KubeClient, unprotected: ControllerUnderTest
) -> None:
    """With --compute-domain-in-use-protection=false the domain goes while its pod still holds the claim."""
    namespace = f"{USER_NS}-off"
    uid = await ready_domain(kube, "unheld", namespace)
    claim_in_use(cluster, namespace, uid, "worker-0")
    cluster.kubectl("delete", "computedomain", "unheld", "-n", namespace, "--wait=false")
    await eventually("unheld gone", lambda: domain_gone(cluster, "unheld", namespace), within=30)
    assert in_use_events(cluster, namespace, uid) == []
    assert get_json(cluster, "resourceclaim", "worker-0-channel", "-n", namespace)["status"]["reservedFor"]
