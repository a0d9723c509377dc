"""Taking over a running install and handing it back (docs/migration.md), on a driver-managed rack.

Upstream's Go images cannot run here, so the install taken over is this chart installed the way
upstream's is: release and namespace ``dra-driver-nvidia-gpu``, ``nameOverride`` giving upstream's
object names and ``<name>-component`` selector label, and upstream's default values file. That covers
the Helm side of the procedure (the objects both charts create under the same names, their ownership,
what an uninstall deletes and keeps), what stays in the cluster while no driver runs, and a new
release's plugin taking over each node's checkpoint, CDI specs, sockets and ResourceSlices from the
previous one. It cannot cover upstream's binaries reading our files or our controller next to
upstream's Go daemons: the formats are pinned by unit tests (docs/compatibility.md §2.5-§2.7).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from imexdra.api.constants import COMPUTE_DOMAIN_FINALIZER, COMPUTE_DOMAIN_LABEL_KEY, daemon_object_name
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.e2e import migration
from tests.e2e.helpers import (
    CHANNEL_DEVICE_DIR,
    cdi_spec,
    channel_pod,
    claim_uid_of,
    container_state,
    domain_status,
    injected_channel_devices,
    prepared_on,
    ready_pod,
    remove_workloads,
    start_domain_workload,
    status_report,
    workload_containers,
)
from tests.e2e.migration import (
    IMEXDRA,
    KEEP,
    NAMESPACE,
    SHARED,
    UPSTREAM,
    daemon_rbac,
    helm,
    install,
    install_upstream,
    plugins_of,
    release_of,
    switch,
    uids,
)
from tests.support.kubectl import apply, get_json
from tests.support.waiting import wait_until

WORKLOADS = "migrating"
DOMAIN = "long-job"


@pytest.fixture(scope="module")
def bare_rack(pytestconfig: pytest.Config) -> Iterator[LocalCluster]:
    """Two nodes of one clique with their hardware and no driver installed yet."""
    yield from migration.bare_rack(pytestconfig)


def daemon_pods(cluster: LocalCluster, uid: str) -> dict[str, tuple[str, str, int]]:
    """Node -> (pod UID, container ID, restart count) of the domain's daemon pods."""
    pods = get_json(cluster, "pods", "-n", NAMESPACE, "-l", f"{COMPUTE_DOMAIN_LABEL_KEY}={uid}")["items"]
    return {p["spec"]["nodeName"]: container_state(p) for p in pods}


def cliques(cluster: LocalCluster, uid: str) -> dict[str, tuple[str, list[dict[str, Any]]]]:
    """Name -> (UID, daemons) of the domain's ComputeDomainCliques."""
    found = get_json(
        cluster, "computedomaincliques", "-n", NAMESPACE, "-l", f"{COMPUTE_DOMAIN_LABEL_KEY}={uid}"
    )
    return {c["metadata"]["name"]: (c["metadata"]["uid"], c.get("daemons", [])) for c in found["items"]}


def snapshot(cluster: LocalCluster, uid: str) -> dict[str, Any]:
    """What must not change while the driver is swapped under a running domain."""
    ds = get_json(cluster, "daemonset", daemon_object_name(uid), "-n", NAMESPACE)
    return {
        "workloads": workload_containers(cluster, WORKLOADS),
        "checkpoints": {node.name: prepared_on(cluster, node.name) for node in cluster.nodes},
        "daemonSet": ds["metadata"]["uid"],
        "daemons": daemon_pods(cluster, uid),
        "cliques": cliques(cluster, uid),
        "shared": uids(cluster, SHARED),
        "nodeLabels": {
            n["metadata"]["name"]: n["metadata"]["labels"].get(COMPUTE_DOMAIN_LABEL_KEY)
            for n in get_json(cluster, "nodes")["items"]
        },
    }


def claims_of(cluster: LocalCluster) -> dict[str, str]:
    """Node -> the claim UID of the workload pod there."""
    pods = get_json(cluster, "pods", "-n", WORKLOADS)["items"]
    return {p["spec"]["nodeName"]: claim_uid_of(cluster, WORKLOADS, p["metadata"]["name"]) for p in pods}


def test_migration_keeps_domains_and_running_pods(bare_rack: LocalCluster) -> None:
    """A running domain and its pods survive the switch from the upstream-named release to imexdra, the
    new plugin adopts the prepared claims (unpreparing one later), and a new pod gets a channel."""
    cluster = bare_rack
    cluster.create_namespace(NAMESPACE)
    install_upstream(cluster)
    cluster.create_namespace(WORKLOADS)
    nodes = [node.name for node in cluster.nodes]
    uid = start_domain_workload(cluster, WORKLOADS, DOMAIN, nodes, num_nodes=2)
    wait_until(
        "both daemons in the clique", lambda: sum(len(d) for _, d in cliques(cluster, uid).values()) == 2
    )
    before, claims = snapshot(cluster, uid), claims_of(cluster)
    assert all(before["checkpoints"][node] >= {claims[node]} for node in nodes)
    old_daemon_rbac = uids(cluster, daemon_rbac(UPSTREAM))

    # Why the procedure has its steps: the two releases cannot own the shared objects at once.
    for kind, name in SHARED:
        assert release_of(cluster, kind, name) == UPSTREAM
    with pytest.raises(subprocess.CalledProcessError) as refused:
        install(cluster, IMEXDRA)
    assert "invalid ownership metadata" in refused.value.stderr
    assert helm(cluster, "list", "--short", "--all").split() == [UPSTREAM]

    switch(cluster, UPSTREAM, lambda c, *flags: install(c, IMEXDRA, *flags))

    wait_until("imexdra's kubelet plugin Ready on every node", lambda: plugins_of(cluster, IMEXDRA))
    for kind, name in SHARED:
        assert release_of(cluster, kind, name) == IMEXDRA
        assert KEEP not in get_json(cluster, kind, name, "-n", NAMESPACE)["metadata"].get("annotations", {})
    assert helm(cluster, "list", "--short").split() == [IMEXDRA]
    cd = get_json(cluster, "computedomain", DOMAIN, "-n", WORKLOADS)
    assert cd["metadata"]["finalizers"] == [COMPUTE_DOMAIN_FINALIZER]
    assert domain_status(cluster, WORKLOADS, DOMAIN)["status"] == "Ready"
    after = snapshot(cluster, uid)
    assert after == before, (
        "the domain's pods, daemons, cliques, node labels, checkpoints or shared objects changed"
    )
    assert uids(cluster, daemon_rbac(UPSTREAM)) == old_daemon_rbac
    for node in nodes:
        assert cdi_spec(cluster, node, claims[node]).is_file()
    [row] = [d for d in status_report(cluster)["computeDomains"] if d["name"] == DOMAIN]
    assert (row["status"], row["nodeCount"]) == ("Ready", 2)

    # The new plugin unprepares a claim the old one prepared, then prepares a new pod's channel.
    leaving = nodes[1]
    cluster.kubectl("delete", "pod", "worker-1", "-n", WORKLOADS, timeout=120)
    wait_until("the old claim unprepared", lambda: claims[leaving] not in prepared_on(cluster, leaving))
    assert not cdi_spec(cluster, leaving, claims[leaving]).exists()
    apply(cluster, channel_pod("worker-2", WORKLOADS, f"{DOMAIN}-channel", node=leaving))
    pod = wait_until("worker-2 Ready", lambda: ready_pod(cluster, WORKLOADS, "worker-2"), timeout=180)
    assert f"{CHANNEL_DEVICE_DIR}/channel0" in injected_channel_devices(cluster, pod)
    wait_until(
        "the domain Ready again", lambda: domain_status(cluster, WORKLOADS, DOMAIN).get("status") == "Ready"
    )
    assert workload_containers(cluster, WORKLOADS)[nodes[0]] == before["workloads"][nodes[0]]


def test_rollback_hands_the_domain_back(bare_rack: LocalCluster) -> None:
    """After the migration above, the same steps back to the upstream-named release keep the pods running
    and the claims prepared, and that release then tears the domain down."""
    cluster = bare_rack
    uid = get_json(cluster, "computedomain", DOMAIN, "-n", WORKLOADS)["metadata"]["uid"]
    before, imexdra_daemon_rbac = snapshot(cluster, uid), uids(cluster, daemon_rbac(IMEXDRA))

    switch(cluster, IMEXDRA, install_upstream)

    wait_until("the upstream-named kubelet plugin Ready on every node", lambda: plugins_of(cluster, UPSTREAM))
    for kind, name in SHARED:
        assert release_of(cluster, kind, name) == UPSTREAM
    assert helm(cluster, "list", "--short").split() == [UPSTREAM]
    assert snapshot(cluster, uid) == before
    assert domain_status(cluster, WORKLOADS, DOMAIN)["status"] == "Ready"

    remove_workloads(cluster, WORKLOADS)
    assert not get_json(cluster, "computedomaincliques", "-n", NAMESPACE)["items"]
    assert not get_json(cluster, "daemonsets", "-n", NAMESPACE, "-l", COMPUTE_DOMAIN_LABEL_KEY)["items"]
    # What the procedure left behind: imexdra's daemon RBAC, kept for daemons that are now gone.
    assert uids(cluster, daemon_rbac(IMEXDRA)) == imexdra_daemon_rbac
    for kind, name in daemon_rbac(IMEXDRA):
        cluster.kubectl("delete", kind, name, "-n", NAMESPACE)
