"""Workload pods bound only to a node whose IMEX daemon is Ready: DRA binding conditions end to end.

docs/binding-conditions.md. On a two-node rack with gate ComputeDomainBindingConditions on: the nodes'
channel devices carry the binding conditions; the seed MPIJob's workers are bound only once their
node's daemon of the domain is Ready (the controller labels the node, the daemon starts, the controller
sets ``IMEXDaemonReady``, the scheduler binds), so no prepare waits for a daemon; and a claim that can
never be prepared (it names another namespace's domain) is released at once instead of holding the
node's only channel: the victim's pods get both nodes while the squatter stays Pending, told why.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from imexdra.api.constants import DRIVER_NAME
from imexdra_sim import demo, rack
from imexdra_sim.builders import compute_domain
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.e2e.helpers import WORKER_SELECTOR, remove_workloads, run_seed_job
from tests.support.builders import channel_pod
from tests.support.kubectl import apply, get_json, uid_of
from tests.support.waiting import wait_until

NODES = ("gb200-00", "gb200-01")


def _time(stamp: str) -> dt.datetime:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def _condition_time(obj: dict[str, Any], kind: str) -> dt.datetime:
    [condition] = [c for c in obj["status"]["conditions"] if c["type"] == kind and c["status"] == "True"]
    return _time(condition["lastTransitionTime"])


def _events(cluster: LocalCluster, namespace: str, reason: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = get_json(cluster, "events", "-n", namespace)["items"]
    return [e for e in items if e.get("reason") == reason]


def test_the_slices_carry_the_binding_conditions(binding_conditions_rack: LocalCluster) -> None:
    """Each node's channel-0 waits for IMEXDaemonReady, fails on IMEXDaemonFailed; daemon-0 has neither."""
    slices = get_json(binding_conditions_rack, "resourceslices")["items"]
    ours = [s for s in slices if s["spec"]["driver"] == DRIVER_NAME]
    assert sorted(s["spec"]["nodeName"] for s in ours) == list(NODES)
    for found in ours:
        devices = {d["name"]: d for d in found["spec"]["devices"]}
        assert devices["channel-0"]["bindingConditions"] == ["IMEXDaemonReady"]
        assert devices["channel-0"]["bindingFailureConditions"] == ["IMEXDaemonFailed"]
        assert "bindingConditions" not in devices["daemon-0"]


def test_seed_mpijob_workers_bind_only_to_ready_daemons(binding_conditions_rack: LocalCluster) -> None:
    """Every worker is bound no earlier than its node's daemon became Ready; no prepare failed waiting."""
    cluster = binding_conditions_rack
    workers = run_seed_job(cluster, workers=2)
    uid = uid_of(cluster, "computedomain", demo.DOMAIN, demo.WORKLOAD_NAMESPACE)
    daemons = get_json(
        cluster, "pods", "-n", rack.DRIVER_NAMESPACE, "-l", f"resource.nvidia.com/computeDomain={uid}"
    )["items"]
    daemon_ready = {d["spec"]["nodeName"]: _condition_time(d, "Ready") for d in daemons}
    assert set(daemon_ready) == set(NODES)
    for worker in workers:
        node = worker["spec"]["nodeName"]
        bound = _condition_time(worker, "PodScheduled")
        assert bound >= daemon_ready[node], (worker["metadata"]["name"], bound, daemon_ready[node])
        [status] = worker["status"]["resourceClaimStatuses"]
        claim = get_json(cluster, "resourceclaim", status["resourceClaimName"], "-n", demo.WORKLOAD_NAMESPACE)
        [device] = claim["status"]["devices"]
        assert {(c["type"], c["status"]) for c in device["conditions"]} == {("IMEXDaemonReady", "True")}
    assert _events(cluster, demo.WORKLOAD_NAMESPACE, "FailedPrepareDynamicResources") == []
    cluster.kubectl("delete", "mpijob", demo.JOB, "-n", demo.WORKLOAD_NAMESPACE, timeout=120)
    wait_until(
        "the workers gone",
        lambda: not get_json(cluster, "pods", "-n", demo.WORKLOAD_NAMESPACE, "-l", WORKER_SELECTOR)["items"],
        timeout=120,
    )
    remove_workloads(cluster, demo.WORKLOAD_NAMESPACE)


def test_a_claim_naming_another_namespaces_domain_does_not_hold_the_node(
    binding_conditions_rack: LocalCluster,
) -> None:
    """The squatter's claim is released with ComputeDomainNotFound; the victim's pods get both nodes."""
    cluster, victim, tenant = binding_conditions_rack, "team-a", "team-b"
    for namespace in (victim, tenant):
        cluster.create_namespace(namespace)
    apply(cluster, compute_domain("victim", victim, num_nodes=2))
    uid = uid_of(cluster, "computedomain", "victim", victim)
    parameters = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomainChannelConfig",
        "domainID": uid,
    }
    squat = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "squat", "namespace": tenant},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "channel",
                        "exactly": {"deviceClassName": "compute-domain-default-channel.nvidia.com"},
                    }
                ],
                "config": [{"opaque": {"driver": DRIVER_NAME, "parameters": parameters}}],
            }
        },
    }
    apply(cluster, squat, channel_pod("squatter", tenant, "squat", existing_claim=True, node=NODES[0]))
    [event] = wait_until(
        "the squatter told why", lambda: _events(cluster, tenant, "ComputeDomainNotFound")[:1], timeout=60
    )
    assert f"namespace {tenant}" in event["message"] and victim not in event["message"]

    for i, node in enumerate(NODES):
        apply(cluster, channel_pod(f"worker-{i}", victim, "victim-channel", node=node))

    def victim_running() -> bool:
        pods = get_json(cluster, "pods", "-n", victim)["items"]
        return len(pods) == 2 and all(p["status"].get("phase") == "Running" for p in pods)

    wait_until("the victim's pods Running on both nodes", victim_running, timeout=180)
    squatter = get_json(cluster, "pod", "squatter", "-n", tenant)
    assert not squatter["spec"].get("nodeName"), "the squatter was bound"
    labels = {
        n["metadata"]["name"]: n["metadata"]["labels"].get("resource.nvidia.com/computeDomain")
        for n in get_json(cluster, "nodes")["items"]
    }
    assert labels == {node: uid for node in NODES}
    cluster.kubectl("delete", "pods,resourceclaims", "--all", "-n", tenant, "--wait=true", timeout=120)
    remove_workloads(cluster, victim)
