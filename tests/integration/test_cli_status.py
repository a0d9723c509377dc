"""``imexdra status`` and ``imexdra diagnose`` against the real local control plane.

The scene is built as cluster admin, without the driver running: two ComputeDomains (``train``
NotReady with one of two nodes, ``other`` Ready), a clique of ``train`` in a driver namespace of the
module's own, a GPU node object labelled for ``other`` and without a clique label, an unscheduled
``train`` pod (the real scheduler reports FailedScheduling for its claim), a ``train`` pod bound to the
labelled node with a FailedPrepareDynamicResources event, and a ResourceClaim whose allocation by
``compute-domain.nvidia.com`` is written through the status subresource. The installed CLI is run
as a subprocess with the admin kubeconfig.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from imexdra_sim.builders import channel_claim, channel_config, channel_template, compute_domain
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.support.cli import IMEXDRA, imexdra
from tests.support.kubectl import apply, patch_status, uid_of
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

CLIQUE = "test-cluster.0"
CD_LABEL = "resource.nvidia.com/computeDomain"
PREPARE_ERROR = (
    "error preparing devices for claim {ns}/conflicted-imex: permanent error: "
    'allocationMode "All" is not supported under HostManagedIMEX'
)


@pytest.fixture(scope="module")
def scene(cluster: LocalCluster, compute_domain_crds: None) -> Iterator[dict[str, str]]:
    """The objects described in the module docstring; names and UIDs returned by role."""
    suffix = secrets.token_hex(3)
    ns, driver_ns, gpu_node = f"cli-status-{suffix}", f"cli-driver-{suffix}", f"cli-gpu-{suffix}"
    cluster.create_namespace(ns)
    cluster.kubectl("create", "namespace", driver_ns)
    try:
        yield build_scene(cluster, ns, driver_ns, gpu_node)
    finally:
        cluster.kubectl("delete", "node", gpu_node, "--wait=false", check=False)
        # The conflicted worker is bound to that kubelet-less node: no kubelet confirms its graceful
        # deletion, and the pod garbage collector's orphan sweep takes about a minute; nothing runs it.
        cluster.kubectl("delete", "pods", "--all", "-n", ns, "--grace-period=0", "--force", check=False)
        # Wait: the scene's claim holds node-0's channel-0, which the next module may need at once.
        cluster.kubectl("delete", "namespace", ns, driver_ns, "--timeout=120s", check=False, timeout=150)


def build_scene(cluster: LocalCluster, ns: str, driver_ns: str, gpu_node: str) -> dict[str, str]:
    for name, num_nodes in (("train", 2), ("other", 0)):
        apply(
            cluster,
            compute_domain(name, ns, num_nodes=num_nodes),
            channel_template(ns, f"{name}-channel"),
        )
    uid = uid_of(cluster, "computedomain", "train", ns)
    other_uid = uid_of(cluster, "computedomain", "other", ns)
    node_entry = {
        "name": "node-0",
        "ipAddress": "127.100.1.5",
        "cliqueID": CLIQUE,
        "index": 0,
        "status": "Ready",
    }
    patch_status(
        cluster, "computedomain", "train", ns, {"status": {"status": "NotReady", "nodes": [node_entry]}}
    )
    patch_status(cluster, "computedomain", "other", ns, {"status": {"status": "Ready"}})
    daemon = {
        "nodeName": "node-0",
        "ipAddress": "127.100.1.5",
        "cliqueID": CLIQUE,
        "index": 0,
        "status": "Ready",
    }
    apply(
        cluster,
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomainClique",
            "metadata": {
                "name": f"{uid}.{CLIQUE}",
                "namespace": driver_ns,
                "labels": {CD_LABEL: uid, f"{CD_LABEL}.cliqueID": CLIQUE},
            },
            "daemons": [daemon],
        },
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": gpu_node, "labels": {"nvidia.com/gpu.present": "true", CD_LABEL: other_uid}},
        },
        workload_pod(ns, "stuck-worker", None),
        workload_pod(ns, "conflicted-worker", gpu_node),
    )
    pod_uid = uid_of(cluster, "pod", "conflicted-worker", ns)
    for minute, message in ((1, "an older failure"), (2, PREPARE_ERROR.format(ns=ns))):
        apply(cluster, prepare_event(ns, pod_uid, minute, message))
    apply(cluster, channel_claim(ns, "prepared-imex", uid))
    patch_status(cluster, "resourceclaim", "prepared-imex", ns, {"status": allocation(uid, pod_uid)})
    return {"ns": ns, "driver_ns": driver_ns, "gpu_node": gpu_node, "uid": uid, "other_uid": other_uid}


def workload_pod(ns: str, name: str, node: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "imexdra.test/host:latest",
                "command": ["sleep", "3600"],
                "resources": {"claims": [{"name": "imex"}]},
            }
        ],
        "resourceClaims": [{"name": "imex", "resourceClaimTemplateName": "train-channel"}],
    }
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}, "spec": spec}


def prepare_event(ns: str, pod_uid: str, minute: int, message: str) -> dict[str, Any]:
    at = f"2030-01-01T00:0{minute}:00Z"
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"conflicted-worker.prepare-{minute}", "namespace": ns},
        "involvedObject": {"kind": "Pod", "name": "conflicted-worker", "namespace": ns, "uid": pod_uid},
        "reason": "FailedPrepareDynamicResources",
        "message": message,
        "type": "Warning",
        "firstTimestamp": at,
        "lastTimestamp": at,
        "source": {"component": "kubelet"},
    }


def allocation(uid: str, pod_uid: str) -> dict[str, Any]:
    selector = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-0"]}]}
    return {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": "channel",
                        "driver": "compute-domain.nvidia.com",
                        "pool": "node-0",
                        "device": "channel-0",
                    }
                ],
                "config": [{"source": "FromClaim", **channel_config(uid)}],
            },
            "nodeSelector": {"nodeSelectorTerms": [selector]},
        },
        "reservedFor": [{"resource": "pods", "name": "conflicted-worker", "uid": pod_uid}],
    }


def status_json(cluster: LocalCluster, scene: dict[str, str]) -> dict[str, Any]:
    result = imexdra(
        cluster, "status", "-n", scene["ns"], "--driver-namespace", scene["driver_ns"], "-o", "json"
    )
    assert result.returncode == 0, result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def test_status_json_shows_domains_cliques_nodes_and_channels(
    cluster: LocalCluster, scene: dict[str, str]
) -> None:
    """Every section of the status report reflects the objects in the cluster."""
    report = status_json(cluster, scene)
    ns, uid = scene["ns"], scene["uid"]
    domains = {d["name"]: d for d in report["computeDomains"]}
    assert sorted(domains) == ["other", "train"]
    train = domains["train"]
    assert (train["namespace"], train["uid"], train["status"]) == (ns, uid, "NotReady")
    assert (train["numNodes"], train["nodeCount"], train["allocationMode"]) == (2, 1, "Single")
    assert train["resourceClaimTemplate"] == "train-channel"
    assert train["cliques"] == [
        {
            "name": f"{uid}.{CLIQUE}",
            "cliqueID": CLIQUE,
            "daemons": [
                {
                    "nodeName": "node-0",
                    "ipAddress": "127.100.1.5",
                    "cliqueID": CLIQUE,
                    "index": 0,
                    "status": "Ready",
                    "imexPeers": None,  # the daemon of this scene never reported
                }
            ],
        }
    ]
    assert train["imexPeersConnected"] is None
    assert domains["other"]["cliques"] == []
    nodes = {n["name"]: n for n in report["nodes"]}
    assert nodes["node-0"]["gpuClique"] == CLIQUE
    assert nodes[scene["gpu_node"]] == {
        "name": scene["gpu_node"],
        "gpuClique": None,
        "computeDomainUID": scene["other_uid"],
        "computeDomain": f"{ns}/other",
        "notReady": None,
    }
    assert report["channels"] == [
        {
            "namespace": ns,
            "name": "prepared-imex",
            "devices": ["node-0/channel-0"],
            "node": "node-0",
            "reservedFor": ["conflicted-worker"],
            "computeDomainUID": uid,
            "computeDomain": f"{ns}/train",
        }
    ]


def test_status_text_output(cluster: LocalCluster, scene: dict[str, str]) -> None:
    """The default output is tables with one row per domain."""
    result = imexdra(cluster, "status", "-A", "--driver-namespace", scene["driver_ns"])
    assert result.returncode == 0, result.stderr
    assert "PREPARED CHANNELS" in result.stdout
    assert any(line.startswith(f"{scene['ns']}/train ") for line in result.stdout.splitlines())


async def test_diagnose_explains_the_stuck_domain(cluster: LocalCluster, scene: dict[str, str]) -> None:
    """Too few nodes, no DaemonSet, the node conflict and both pods' newest events; exit code 1."""
    ns, node = scene["ns"], scene["gpu_node"]

    def scheduler_event() -> bool:
        out = cluster.kubectl("get", "events", "-n", ns, "--field-selector=involvedObject.name=stuck-worker")
        return "FailedScheduling" in out.stdout

    await eventually("FailedScheduling event for stuck-worker", scheduler_event, within=60)
    args = ["--driver-namespace", scene["driver_ns"], "--imex-mode", "driver-managed"]
    result = imexdra(cluster, "diagnose", f"{ns}/train", *args, "-o", "json")
    assert result.returncode == 1, result.stdout + result.stderr
    document = json.loads(result.stdout)
    assert (document["found"], document["problems"], document["imexMode"]) == (True, True, "driver-managed")
    messages = [f["message"] for f in document["findings"]]
    assert "status NotReady: 1 of numNodes=2 nodes have joined (node-0)" in messages
    assert (
        f"daemon DaemonSet {scene['driver_ns']}/computedomain-daemon-{scene['uid']} does not exist"
        in messages
    )
    assert f"node {node} (pod conflicted-worker) has no nvidia.com/gpu.clique label" in messages
    assert (
        f"node {node} is labelled {CD_LABEL}={scene['other_uid']} ({ns}/other) "
        "while pod conflicted-worker of this domain is pending there"
    ) in messages
    [conflicted] = [m for m in messages if m.startswith("pod conflicted-worker is stuck")]
    assert f'FailedPrepareDynamicResources: "{PREPARE_ERROR.format(ns=ns)}"' in conflicted
    assert "an older failure" not in conflicted
    [unscheduled] = [m for m in messages if m.startswith("pod stuck-worker is stuck")]
    assert "not scheduled" in unscheduled
    assert "FailedScheduling: " in unscheduled

    text = imexdra(cluster, "diagnose", "train", "-n", ns, *args)
    assert text.returncode == 1
    assert "[ERROR] status NotReady" in text.stdout
    assert "hint: " in text.stdout


def test_diagnose_host_managed_ready_domain_is_fine(cluster: LocalCluster, scene: dict[str, str]) -> None:
    """In host-managed mode a Ready domain without daemons or pods has no problem: exit code 0."""
    args = ["--imex-mode", "host-managed", "--driver-namespace", scene["driver_ns"]]  # nothing is guessed
    result = imexdra(cluster, "diagnose", f"{scene['ns']}/other", *args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no problem found" in result.stdout


def test_diagnose_missing_domain_exits_4(cluster: LocalCluster, scene: dict[str, str]) -> None:
    """A domain that does not exist is exit code 4 (2 is click's usage error) with a clear message."""
    result = imexdra(cluster, "diagnose", "absent", "-n", scene["ns"], "-o", "json")
    assert result.returncode == 4, result.stdout + result.stderr
    document = json.loads(result.stdout)
    assert document["found"] is False
    assert document["findings"][0]["message"] == f"ComputeDomain {scene['ns']}/absent does not exist"


def test_unreachable_cluster_is_exit_code_3(tmp_path: Path) -> None:
    """A kubeconfig that cannot be used is a clear error with its own exit code."""
    bad = tmp_path / "kubeconfig"
    bad.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    result = subprocess.run(
        [IMEXDRA, "status", "--kubeconfig", str(bad)], capture_output=True, text=True, check=False, timeout=60
    )
    assert result.returncode == 3, result.stdout + result.stderr
    assert "Error:" in result.stderr
