"""Workload pods bound only to a node whose IMEX daemon is Ready: DRA binding conditions end to end.

docs/binding-conditions.md. On a two-node rack with gate ComputeDomainBindingConditions on: the nodes'
channel devices carry the binding conditions; the seed MPIJob's workers are bound only once their
node's daemon of the domain is Ready (the controller labels the node, the daemon starts, the controller
sets ``IMEXDaemonReady``, the scheduler binds), so no prepare waits for a daemon; and a claim that can
never be prepared (it names another namespace's domain) is released at once instead of holding the
node's only channel: the victim's pods get both nodes while the squatter stays Pending, told why; a
pod pinned to a node whose daemon cannot start is never bound there and is told why, and deleting it
leaves neither the node's label nor a daemon behind.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest

from imexdra.api.constants import DRIVER_NAME
from imexdra_sim import demo, rack
from imexdra_sim.builders import compute_domain
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.e2e.helpers import (
    WORKER_SELECTOR,
    events_of,
    remove_workloads,
    run_seed_job,
    squat_then_run_victim,
    without_imex,
)
from tests.support.builders import channel_pod
from tests.support.kubectl import apply, get_json, uid_of
from tests.support.waiting import wait_until

NODES = ("gb200-00", "gb200-01")


def _time(stamp: str) -> dt.datetime:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def _condition_time(obj: dict[str, Any], kind: str) -> dt.datetime:
    [condition] = [c for c in obj["status"]["conditions"] if c["type"] == kind and c["status"] == "True"]
    return _time(condition["lastTransitionTime"])


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
    assert events_of(cluster, demo.WORKLOAD_NAMESPACE, "FailedPrepareDynamicResources") == []
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
    cluster = binding_conditions_rack
    uid = squat_then_run_victim(cluster, victim="team-a", tenant="team-b", nodes=NODES)
    labels = {
        n["metadata"]["name"]: n["metadata"]["labels"].get("resource.nvidia.com/computeDomain")
        for n in get_json(cluster, "nodes")["items"]
    }
    assert labels == {node: uid for node in NODES}
    cluster.kubectl("delete", "pods,resourceclaims", "--all", "-n", "team-b", "--wait=true", timeout=120)
    remove_workloads(cluster, "team-a")


@pytest.fixture
def node_without_imex(binding_conditions_rack: LocalCluster) -> Iterator[str]:
    """gb200-01 without nvidia-imex in its driver install: its IMEX daemons fail at start."""
    yield from without_imex(binding_conditions_rack, "gb200-01")


def test_a_node_whose_daemon_cannot_start_never_gets_the_pod(
    binding_conditions_rack: LocalCluster, node_without_imex: str
) -> None:
    """Pinned there, the pod stays unbound, told DaemonFailing (its own Event, not the domain's); deleted,
    the node's label and the daemon go too (nothing stuck in ContainerCreating, nothing leaked)."""
    cluster, namespace = binding_conditions_rack, "broken"
    cluster.create_namespace(namespace)
    apply(cluster, compute_domain("broken", namespace, num_nodes=1))
    uid = uid_of(cluster, "computedomain", "broken", namespace)
    apply(cluster, channel_pod("worker", namespace, "broken-channel", node=node_without_imex))

    def told() -> list[dict[str, Any]]:
        events = events_of(cluster, namespace, "DaemonFailing")
        return [e for e in events if e["involvedObject"]["kind"] == "Pod"]

    [event] = wait_until("the worker told its node's daemon keeps failing", told, timeout=180)
    # The daemon's own error where the runtime keeps its termination message (containerd), else its exit.
    assert f"IMEX daemon on node {node_without_imex} keeps failing: " in event["message"]
    worker = get_json(cluster, "pod", "worker", "-n", namespace)
    assert not worker["spec"].get("nodeName"), "the worker was bound to a node whose daemon cannot start"
    cluster.kubectl("delete", "pod", "worker", "-n", namespace, "--wait=true", timeout=60)
    domain = f"resource.nvidia.com/computeDomain={uid}"
    wait_until(
        "the node's label and its daemon gone",
        lambda: (
            not get_json(cluster, "nodes", "-l", domain)["items"]
            and not get_json(cluster, "pods", "-n", rack.DRIVER_NAMESPACE, "-l", domain)["items"]
        ),
        timeout=60,
    )
    remove_workloads(cluster, namespace)
