"""HostManagedIMEX end to end on a simulated rack: the seed flow and seed 004 §14.3.

The rack: gb200-00 and gb200-01 share an NVLink clique, gb200-02 has no fabric. imexdra is installed
with ``featureGates.HostManagedIMEX=true``; the host's own nvidia-imex is out of the driver's scope.
"""

from __future__ import annotations

import pytest

from imexdra.cli import demo, rack
from imexdra.localcluster.cluster import LocalCluster
from tests.e2e.helpers import (
    apply,
    channel_pod,
    compute_domain,
    get_json,
    injected_channel_devices,
    pod_events,
    run_seed_job,
    wait_until,
)

CHANNEL0 = "/dev/nvidia-caps-imex-channels/channel0"


def test_seed_mpijob_gets_channel0_and_no_daemons(host_managed_rack: LocalCluster) -> None:
    """The seed MPIJob runs with channel0 in every worker; no daemon DaemonSet or clique appears."""
    cluster = host_managed_rack
    workers = run_seed_job(cluster, workers=2)
    assert {w["spec"]["nodeName"] for w in workers} == {"gb200-00", "gb200-01"}  # clique affinity
    for worker in workers:
        assert injected_channel_devices(cluster, worker) == [CHANNEL0]
    claims = get_json(cluster, "resourceclaims", "-n", demo.WORKLOAD_NAMESPACE)["items"]
    assert len(claims) == 2 and all(c["status"].get("reservedFor") for c in claims)
    domain = get_json(cluster, "computedomain", demo.DOMAIN, "-n", demo.WORKLOAD_NAMESPACE)
    assert domain["status"]["status"] == "Ready"
    daemonsets = get_json(cluster, "daemonsets", "-n", rack.DRIVER_NAMESPACE)["items"]
    assert [d["metadata"]["name"] for d in daemonsets] == [f"{rack.RELEASE}-kubelet-plugin"]
    assert get_json(cluster, "computedomaincliques", "-A")["items"] == []

    cluster.kubectl("delete", "mpijob", demo.JOB, "-n", demo.WORKLOAD_NAMESPACE, timeout=120)
    cluster.kubectl("delete", "computedomain", demo.DOMAIN, "-n", demo.WORKLOAD_NAMESPACE, timeout=120)
    wait_until(
        "claims and claim template removed",
        lambda: (
            not get_json(cluster, "resourceclaims,resourceclaimtemplates", "-n", demo.WORKLOAD_NAMESPACE)[
                "items"
            ]
        ),
    )


@pytest.fixture
def namespace(host_managed_rack: LocalCluster, request: pytest.FixtureRequest) -> str:
    """A fresh namespace per test."""
    name = request.node.name.replace("_", "-")[:50].strip("-")
    host_managed_rack.create_namespace(name)
    return name


def test_second_channel_claim_on_a_node_is_prevented(host_managed_rack: LocalCluster, namespace: str) -> None:
    """Two channel claims pinned to one node: the first runs, the second is never prepared there."""
    cluster = host_managed_rack
    apply(cluster, compute_domain("cd", namespace, "ch"))
    apply(cluster, channel_pod("first", namespace, "ch", node="gb200-00"))
    wait_until("first pod Running", lambda: _phase(cluster, namespace, "first") == "Running")
    apply(cluster, channel_pod("second", namespace, "ch", node="gb200-00"))
    wait_until(
        "scheduler refuses the second channel claim",
        lambda: any(e["reason"] == "FailedScheduling" for e in pod_events(cluster, namespace, "second")),
    )
    assert _phase(cluster, namespace, "second") == "Pending"


def test_allocation_mode_all_is_a_permanent_prepare_error(
    host_managed_rack: LocalCluster, namespace: str
) -> None:
    """allocationMode All fails prepare with a clear error on the pod, and the pod never starts."""
    cluster = host_managed_rack
    apply(cluster, compute_domain("cd", namespace, "ch", allocationMode="All"))
    apply(cluster, channel_pod("all", namespace, "ch", node="gb200-01"))
    event = wait_until("FailedPrepareDynamicResources", lambda: _prepare_failure(cluster, namespace, "all"))
    assert "allocationMode" in event["message"] and "All" in event["message"]
    assert _phase(cluster, namespace, "all") == "Pending"


def test_node_without_clique_is_a_permanent_prepare_error(
    host_managed_rack: LocalCluster, namespace: str
) -> None:
    """A node whose NVML reports no fabric fails prepare with a message naming the missing clique."""
    cluster = host_managed_rack
    apply(cluster, compute_domain("cd", namespace, "ch"))
    apply(cluster, channel_pod("noclique", namespace, "ch", node="gb200-02"))
    event = wait_until(
        "FailedPrepareDynamicResources", lambda: _prepare_failure(cluster, namespace, "noclique")
    )
    assert "clique" in event["message"].lower()
    assert _phase(cluster, namespace, "noclique") == "Pending"


def _phase(cluster: LocalCluster, namespace: str, pod: str) -> str:
    return str(get_json(cluster, "pod", pod, "-n", namespace)["status"].get("phase", ""))


def _prepare_failure(cluster: LocalCluster, namespace: str, pod: str) -> dict[str, str] | None:
    for event in pod_events(cluster, namespace, pod):
        if event["reason"] == "FailedPrepareDynamicResources":
            return event
    return None
