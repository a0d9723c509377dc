"""Rows of ``imexdra status`` from realistic objects.

Aspects covered: domain rows with their cliques (matched by label or name prefix), GPU node rows with
the clique and ComputeDomain labels, prepared channel rows (devices, node from the allocation or the
reserving pod, consumers, owning domain), IMEX mode detection, the JSON document and the text tables.
"""

from __future__ import annotations

import json

import pytest

from imexdra.cli.clusterview import ImexMode, format_table, imex_mode_from_classes
from imexdra.cli.status import Snapshot, build_report, channel_rows, domain_row, node_rows, render_text
from imexdra.common.kube.models.core_v1 import NodeCondition, NodeStatus
from tests.unit.cli import objects as o


def test_domain_row_reports_spec_status_and_node_count() -> None:
    """Status, numNodes, allocationMode, template name and the number of status nodes are reported."""
    cd = o.domain(
        num_nodes=2, mode="All", status={"status": "NotReady", "nodes": [o.status_node("node-a", 0)]}
    )
    row = domain_row(cd, [])
    assert {k: v for k, v in row.items() if k != "cliques"} == {
        "namespace": "team-a",
        "name": "train",
        "uid": o.UID,
        "status": "NotReady",
        "numNodes": 2,
        "allocationMode": "All",
        "resourceClaimTemplate": "train-channel",
        "nodeCount": 1,
        "channel": None,
        "deleting": False,
        "imexPeersConnected": None,
    }


def test_domain_row_and_table_show_the_channel_under_channel_isolation() -> None:
    """A domain's recorded status.channel is in its row and in the CHANNEL column; none shows as '-'."""
    isolated = o.domain(name="iso", status={"status": "Ready", "nodes": [], "channel": 7})
    assert domain_row(isolated, [])["channel"] == 7
    shared = o.domain(name="shared", status={"status": "Ready", "nodes": []})
    snapshot = Snapshot(
        driver_namespace=o.DRIVER_NS, imex_mode=ImexMode.HOST_MANAGED, domains=[isolated, shared]
    )
    table = render_text(build_report(snapshot)).split("PREPARED CHANNELS")[0]
    header, *rows = [line for line in table.splitlines() if "team-a/" in line or "CHANNEL TEMPLATE" in line]
    assert header.split()[5] == "CHANNEL"
    assert {row.split()[0]: row.split()[5] for row in rows} == {"team-a/iso": "7", "team-a/shared": "-"}


def test_domain_row_without_status_and_being_deleted() -> None:
    """A fresh domain has no status and zero nodes; a deletionTimestamp shows as deleting."""
    row = domain_row(o.domain(deleting=True), [])
    assert (row["status"], row["nodeCount"], row["deleting"]) == (None, 0, True)


@pytest.mark.parametrize("labelled", [True, False], ids=["by-label", "by-name-prefix"])
def test_domain_row_nests_only_its_own_cliques(labelled: bool) -> None:
    """Cliques of the domain are nested with daemons ordered by index; other domains' cliques are not."""
    own, foreign = o.clique(labelled=labelled), o.clique(o.OTHER_UID)
    [row] = domain_row(o.domain(), [foreign, own])["cliques"]
    assert row["name"] == f"{o.UID}.{o.CLIQUE}"
    assert row["cliqueID"] == o.CLIQUE
    assert [(d["index"], d["nodeName"], d["status"]) for d in row["daemons"]] == [
        (0, "node-a", "Ready"),
        (1, "node-b", "Ready"),
    ]
    assert row["daemons"][0]["ipAddress"] == "10.0.1.1"


def test_node_rows_list_gpu_nodes_with_labels_and_domain_names() -> None:
    """Only GPU nodes are listed, with their gpu.clique label and the named domain of their label."""
    nodes = [
        o.node("control-plane"),
        o.gpu_node("node-b", clique_label=False, domain_uid=o.OTHER_UID),
        o.gpu_node("node-a", domain_uid=o.UID),
    ]
    rows = node_rows(nodes, {o.UID: "team-a/train"})
    assert rows == [
        {
            "name": "node-a",
            "gpuClique": o.CLIQUE,
            "computeDomainUID": o.UID,
            "computeDomain": "team-a/train",
            "notReady": None,
        },
        {
            "name": "node-b",
            "gpuClique": None,
            "computeDomainUID": o.OTHER_UID,
            "computeDomain": None,
            "notReady": None,
        },
    ]


def test_node_rows_say_why_a_node_is_not_ready() -> None:
    """A lost node's row carries its Ready condition's status, reason and message; the table shows it."""
    lost = o.gpu_node("node-a", domain_uid=o.UID)
    lost.status = NodeStatus(
        conditions=[
            NodeCondition(
                type="Ready",
                status="Unknown",
                reason="NodeStatusUnknown",
                message="Kubelet stopped posting node status.",
            )
        ]
    )
    [row] = node_rows([lost], {})
    assert row["notReady"] == "Unknown, NodeStatusUnknown: Kubelet stopped posting node status."
    report = {"imexMode": "DriverManaged", "driverNamespace": "d", "computeDomains": [], "channels": []}
    text = render_text({**report, "nodes": [row]})
    assert "node-a  Unknown, NodeStatusUnknown: Kubelet stopped posting node status." in text


def test_channel_rows_cover_only_claims_allocated_by_our_driver() -> None:
    """Unallocated claims and claims of other drivers are not prepared channels."""
    claims = [
        o.claim("gpu", driver="gpu.nvidia.com", device="gpu-0"),
        o.claim("waiting", allocated=False),
        o.claim("worker-0-imex", reserved_for=(("worker-0", "uid-worker-0"),)),
    ]
    rows = channel_rows(claims, {}, {o.UID: "team-a/train"})
    assert rows == [
        {
            "namespace": "team-a",
            "name": "worker-0-imex",
            "devices": ["node-a/channel-0"],
            "node": "node-a",
            "reservedFor": ["worker-0"],
            "computeDomainUID": o.UID,
            "computeDomain": "team-a/train",
        }
    ]


def test_channel_node_falls_back_to_the_reserving_pod() -> None:
    """Without a node selector in the allocation, the node of the reserving pod (by UID) is used."""
    claim = o.claim("c", node_name=None, reserved_for=(("worker-1", "uid-worker-1"),))
    pods = {"uid-worker-1": o.pod("worker-1", node_name="node-b", phase="Running")}
    [row] = channel_rows([claim], pods, {})
    assert row["node"] == "node-b"
    assert [row] == channel_rows([claim], pods, {})  # pure: same input, same rows
    [unknown] = channel_rows([claim], {}, {})
    assert unknown["node"] is None


@pytest.mark.parametrize(
    ("classes", "mode"),
    [
        (
            ["compute-domain-default-channel.nvidia.com", "compute-domain-daemon.nvidia.com"],
            ImexMode.DRIVER_MANAGED,
        ),
        (["compute-domain-default-channel.nvidia.com", "gpu.nvidia.com"], ImexMode.HOST_MANAGED),
        (["gpu.nvidia.com"], ImexMode.UNKNOWN),
    ],
    ids=["both-classes", "channel-class-only", "not-installed"],
)
def test_imex_mode_from_device_classes(classes: list[str], mode: ImexMode) -> None:
    """The host-managed chart omits the daemon DeviceClass; that is how the mode is told."""
    assert imex_mode_from_classes(classes) is mode


def test_report_is_one_stable_json_document() -> None:
    """The report has fixed top-level keys and serialises to JSON as is."""
    report = build_report(o.snapshot())
    assert list(report) == ["driverNamespace", "imexMode", "computeDomains", "nodes", "channels"]
    decoded = json.loads(json.dumps(report, sort_keys=True))
    assert decoded["imexMode"] == "driver-managed"
    assert [d["name"] for d in decoded["computeDomains"]] == ["train"]
    assert [len(c["daemons"]) for c in decoded["computeDomains"][0]["cliques"]] == [2]
    assert decoded["nodes"][0]["computeDomain"] == "team-a/train"
    assert decoded["channels"][0]["computeDomain"] == "team-a/train"


def test_text_output_has_one_aligned_table_per_section() -> None:
    """Text output names each section and lines the columns up."""
    text = render_text(build_report(o.snapshot()))
    for heading in ("COMPUTE DOMAINS", "CLIQUES", "GPU NODES", "PREPARED CHANNELS"):
        assert heading in text
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("NAMESPACE/NAME"))
    row = next(line for line in lines if line.startswith("team-a/train "))
    assert row.index("Ready") == header.index("STATUS")
    assert "node-a/channel-0" in text


def test_format_table_aligns_columns_and_marks_missing_values() -> None:
    """Columns are as wide as their widest cell; None and empty cells show as '-'."""
    assert format_table(["A", "LONG"], [["xyz", None], ["", "v"]]).splitlines() == [
        "A    LONG",
        "xyz  -",
        "-    v",
    ]
