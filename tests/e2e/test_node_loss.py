"""Node loss, as racks lose nodes (docs/node-loss.md): a tray dies with everything on it.

``LocalCluster.lose_node`` SIGKILLs the node's kubelet, runtime and every process on it at once; the
control plane learns of it only by the kubelet's silence (the rack marks silent nodes Unknown after
20 s). Checked on a driver-managed domain with one workload pod per node:

- within a bound, the domain's status, a ``NodeNotReady`` event and ``imexdra status`` say which
  node and why; the other daemons and workloads are not restarted; the domain and its cliques are
  written a handful of times, not in a storm;
- the node returns (same name and state): it rejoins with its old clique index, and the claim of the
  pod force-deleted while it was away is unprepared there;
- a fresh node replaces it: it takes a free index, and the domain is Ready again once the lost node's
  pods are gone.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator

import pytest

from imexdra.api.flags.daemon import DEFAULT_IMEX_PEERS_POLL_INTERVAL
from imexdra.api.imexpeers import IMEX_PEERS_CONNECTED, REPORT_SPACING_POLLS
from imexdra_sim import rack
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.e2e.helpers import (
    COMPUTE_DOMAIN_LABEL,
    channel_pod,
    container_state,
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
from tests.e2e.racks import NODE_LOSS, NODE_LOSS_GRACE_SECONDS
from tests.support.kubectl import apply, get_json
from tests.support.waiting import wait_until
from tests.support.watching import Write, WriteCounter

DOMAIN = "rack-job"
#: From the kill to the domain saying so: the grace period, the node monitor's 5 s period, the pods'
#: readiness update and the controller's batching, with room for a loaded machine.
REPORT_WITHIN = NODE_LOSS_GRACE_SECONDS + 40
#: What the loss may cost, for the whole outage (docs/node-loss.md §2): one write of the clique (the
#: entry NotReady) and one of the domain (NotReady) that say so, and the survivors' IMEX-health reports,
#: which the controller publishes at most once per report spacing however many daemons report
#: (docs/imex-health.md §3). Anything like one write per event or per resync breaks the spacing.
REPORT_SPACING = DEFAULT_IMEX_PEERS_POLL_INTERVAL * REPORT_SPACING_POLLS
#: The watch delivers writes late by different amounts, and a status roll-up may follow its cliques'
#: write by up to 2 s (docs/architecture.md §5.1).
SPACING_SLACK = 3.0


@pytest.fixture
def namespace(node_loss_rack: LocalCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace of the test's own, emptied afterwards (after any node it lost is back)."""
    yield from node_loss_namespace(node_loss_rack, request)


def indices(cluster: LocalCluster, namespace: str) -> dict[str, int]:
    """Node -> index in the domain's status."""
    return {n["name"]: n["index"] for n in domain_status(cluster, namespace, DOMAIN).get("nodes", [])}


def daemon_containers(cluster: LocalCluster, uid: str) -> dict[str, tuple[str, str, int]]:
    """Node -> (pod UID, container ID, restart count) of the domain's daemon pods."""
    pods = get_json(cluster, "pods", "-n", rack.DRIVER_NAMESPACE, "-l", f"{COMPUTE_DOMAIN_LABEL}={uid}")[
        "items"
    ]
    return {
        p["spec"]["nodeName"]: container_state(p) for p in pods if not p["metadata"].get("deletionTimestamp")
    }


def node_not_ready_events(cluster: LocalCluster, namespace: str) -> list[str]:
    """Notes of the domain's ``NodeNotReady`` events."""
    events = get_json(cluster, "events", "-n", namespace, "--field-selector", "reason=NodeNotReady")["items"]
    return [e.get("message", "") for e in events if e["involvedObject"]["name"] == DOMAIN]


def wait_loss_reported(cluster: LocalCluster, namespace: str, lost: str, started: float) -> float:
    """Wait until the domain, its events and ``imexdra status`` name ``lost`` and why; return seconds."""

    def entry_not_ready() -> bool:
        status = domain_status(cluster, namespace, DOMAIN)
        entries = {n["name"]: n["status"] for n in status.get("nodes", [])}
        return status.get("status") == "NotReady" and entries.get(lost) == "NotReady"

    wait_until(f"the domain NotReady with {lost} NotReady", entry_not_ready, timeout=REPORT_WITHIN)
    notes = wait_until(
        f"a NodeNotReady event naming {lost}",
        lambda: [n for n in node_not_ready_events(cluster, namespace) if f"node {lost} " in n],
        timeout=30,
    )
    assert "Kubelet stopped posting node status" in notes[0]
    seconds = time.monotonic() - started
    report = status_report(cluster)
    [domain] = [d for d in report["computeDomains"] if d["name"] == DOMAIN and d["namespace"] == namespace]
    daemons = {d["nodeName"]: d["status"] for c in domain["cliques"] for d in c["daemons"]}
    assert daemons[lost] == "NotReady"
    assert all(status == "Ready" for node, status in daemons.items() if node != lost)
    [row] = [n for n in report["nodes"] if n["name"] == lost]
    assert row["notReady"].startswith("Unknown, NodeStatusUnknown")
    return seconds


def reports_only(write: Write) -> bool:
    """Whether the write changed nothing but daemons' IMEX-health reports (and their condition)."""
    return all(
        ".imexPeers" in c or c.startswith(f"status.conditions[{IMEX_PEERS_CONNECTED}]") for c in write.changed
    )


def assert_loss_cost(counter: WriteCounter, loss: str) -> None:
    """One write says ``loss`` (a change starting with it); the others are spaced report publications."""
    writes = counter.writes()
    saying = [w for w in writes if not reports_only(w)]
    assert len(saying) == 1 and any(c.startswith(loss) for c in saying[0].changed), counter.describe()
    for before, report in itertools.pairwise(writes):
        if reports_only(report):
            assert report.at - before.at >= REPORT_SPACING - SPACING_SLACK, counter.describe()


def test_a_lost_node_is_reported_and_rejoins_with_its_index(
    node_loss_rack: LocalCluster, namespace: str
) -> None:
    """Loss: reported in time, nothing else restarts, no storm; return: old index, stale claim unprepared."""
    cluster = node_loss_rack
    nodes = ready_nodes(cluster)[:4]
    lost = losable_nodes(cluster)[-1]
    survivors = [n for n in nodes if n != lost]
    uid = start_domain_workload(cluster, namespace, DOMAIN, nodes, num_nodes=len(nodes))
    index_before = indices(cluster, namespace)
    daemons_before = daemon_containers(cluster, uid)
    workloads_before = workload_containers(cluster, namespace)

    with (
        WriteCounter(cluster, "computedomain", namespace, DOMAIN) as domain_writes,
        WriteCounter(cluster, "computedomaincliques", rack.DRIVER_NAMESPACE) as clique_writes,
    ):
        started = time.monotonic()
        cluster.lose_node(lost)
        seconds = wait_loss_reported(cluster, namespace, lost, started)
        print(f"loss of {lost} reported after {seconds:.1f} s")
        # The operator gives up on the pod: its claim goes, and is stale on the node when it returns.
        pod, stale_claim = force_delete_pod_on(cluster, namespace, lost)
        wait_until(
            "the force-deleted pod's claim gone",
            lambda: (
                not cluster.kubectl("get", "resourceclaims", "-n", namespace, "-o", "name").stdout.count(pod)
            ),
            timeout=60,
        )
        assert stale_claim in prepared_on(cluster, lost)
        apply(cluster, channel_pod(pod, namespace, f"{DOMAIN}-channel", node=lost))
        daemons_during = daemon_containers(cluster, uid)
        workloads_during = workload_containers(cluster, namespace)
    print(f"writes while {lost} was lost:\n{domain_writes.describe()}\n{clique_writes.describe()}")
    assert_loss_cost(domain_writes, "status.status: 'Ready' -> 'NotReady'")
    assert_loss_cost(clique_writes, f"daemons[{lost}].status: 'Ready' -> 'NotReady'")
    for node in survivors:
        assert daemons_during[node] == daemons_before[node], f"the daemon on {node} restarted"
        assert workloads_during[node] == workloads_before[node], f"the workload on {node} restarted"

    restore_and_resume(cluster, lost, stale_claim, namespace, pod)

    def rejoined() -> bool:
        status = domain_status(cluster, namespace, DOMAIN)
        entries = {n["name"]: (n["index"], n["status"]) for n in status.get("nodes", [])}
        return status.get("status") == "Ready" and entries.get(lost) == (index_before[lost], "Ready")

    wait_until(f"{lost} back at index {index_before[lost]} and the domain Ready", rejoined, timeout=240)
    assert indices(cluster, namespace) == index_before
    daemons_after = daemon_containers(cluster, uid)
    for node in survivors:
        assert daemons_after[node] == daemons_before[node], f"the daemon on {node} restarted"


def test_a_replacement_node_takes_a_free_index(node_loss_rack: LocalCluster, namespace: str) -> None:
    """A fresh node instead of the lost one gets an index no live member has; the domain heals."""
    cluster = node_loss_rack
    nodes = ready_nodes(cluster)[:4]
    lost = losable_nodes(cluster)[0]
    survivors = [n for n in nodes if n != lost]
    uid = start_domain_workload(cluster, namespace, DOMAIN, nodes, num_nodes=len(nodes))
    index_before = indices(cluster, namespace)
    daemons_before = daemon_containers(cluster, uid)

    started = time.monotonic()
    cluster.lose_node(lost)
    wait_loss_reported(cluster, namespace, lost, started)
    # The tray is pulled: its pod and its Node go, and a spare tray takes its place.
    pod, _claim = force_delete_pod_on(cluster, namespace, lost)
    cluster.kubectl("delete", "node", lost)
    spare = max(int(n.name.removeprefix("gb200-")) for n in cluster.nodes) + 1
    replacement = rack.add_spare_node(cluster, NODE_LOSS, spare).name
    apply(cluster, channel_pod(pod, namespace, f"{DOMAIN}-channel", node=replacement))

    def healed() -> dict[str, int] | None:
        status = domain_status(cluster, namespace, DOMAIN)
        entries = {n["name"]: n["index"] for n in status.get("nodes", [])}
        ok = status.get("status") == "Ready" and set(entries) == {*survivors, replacement}
        return entries if ok else None

    # The lost node's daemon pod goes with its Node (pod garbage collection, after a 40 s quarantine).
    healed_indices = wait_until(f"{replacement} in the domain instead of {lost}, Ready", healed, timeout=300)
    assert {n: healed_indices[n] for n in survivors} == {n: index_before[n] for n in survivors}
    assert healed_indices[replacement] not in {index_before[n] for n in survivors}
    assert 0 <= healed_indices[replacement] < 18
    daemons_after = daemon_containers(cluster, uid)
    for node in survivors:
        assert daemons_after[node] == daemons_before[node], f"the daemon on {node} restarted"
