"""Node loss under HostManagedIMEX: no daemons, so the domain is not the driver's to mark NotReady.

The host runs nvidia-imex; the driver only hands out channel 0. A lost node takes its pod's channel
with it: the domain stays Ready for the other nodes (and is not written at all), ``imexdra status``
names the node and why, the other pods keep running; when the node returns, the claim of the pod
force-deleted meanwhile is unprepared there and a new pod gets the node's channel again.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from imexdra_sim.localcluster.cluster import LocalCluster
from tests.e2e.helpers import (
    channel_pod,
    domain_status,
    force_delete_pod_on,
    losable_nodes,
    node_loss_namespace,
    prepared_on,
    ready_nodes,
    restore_and_resume,
    start_domain_workload,
    status_report,
    workload_containers,
)
from tests.e2e.racks import NODE_LOSS_GRACE_SECONDS
from tests.support.kubectl import apply
from tests.support.waiting import wait_until
from tests.support.watching import WriteCounter

DOMAIN = "host-job"
REPORT_WITHIN = NODE_LOSS_GRACE_SECONDS + 40


@pytest.fixture
def namespace(host_managed_node_loss_rack: LocalCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace of the test's own, emptied afterwards (after any node it lost is back)."""
    yield from node_loss_namespace(host_managed_node_loss_rack, request)


def test_a_lost_node_leaves_the_domain_ready_and_its_claim_is_unprepared_on_return(
    host_managed_node_loss_rack: LocalCluster, namespace: str
) -> None:
    """Loss: domain Ready and unwritten, node named with its reason; return: stale claim unprepared."""
    cluster = host_managed_node_loss_rack
    nodes = ready_nodes(cluster)
    lost = losable_nodes(cluster)[-1]
    survivors = [n for n in nodes if n != lost]
    start_domain_workload(cluster, namespace, DOMAIN, nodes, num_nodes=0)
    workloads_before = workload_containers(cluster, namespace)

    with WriteCounter(cluster, "computedomain", namespace, DOMAIN) as domain_writes:
        started = time.monotonic()
        cluster.lose_node(lost)

        def reported() -> bool:
            [row] = [n for n in status_report(cluster)["nodes"] if n["name"] == lost]
            return bool(row["notReady"]) and row["notReady"].startswith("Unknown, NodeStatusUnknown")

        wait_until(f"imexdra status naming {lost} not Ready", reported, timeout=REPORT_WITHIN)
        print(f"loss of {lost} reported after {time.monotonic() - started:.1f} s")
        assert domain_status(cluster, namespace, DOMAIN).get("status") == "Ready"
        pod, stale_claim = force_delete_pod_on(cluster, namespace, lost)
        wait_until(
            "the force-deleted pod's claim gone",
            lambda: pod not in cluster.kubectl("get", "resourceclaims", "-n", namespace, "-o", "name").stdout,
            timeout=60,
        )
        assert stale_claim in prepared_on(cluster, lost)
        apply(cluster, channel_pod(pod, namespace, f"{DOMAIN}-channel", node=lost))
        workloads_during = workload_containers(cluster, namespace)
    assert domain_writes.writes() == [], domain_writes.describe()
    for node in survivors:
        assert workloads_during[node] == workloads_before[node], f"the workload on {node} restarted"

    restore_and_resume(cluster, lost, stale_claim, namespace, pod)
    assert domain_status(cluster, namespace, DOMAIN).get("status") == "Ready"
    for node in survivors:
        assert workload_containers(cluster, namespace)[node] == workloads_before[node]
