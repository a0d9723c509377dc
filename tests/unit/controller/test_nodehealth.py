"""controller.nodehealth: which daemons are not ready because their node is not, and what to say."""

from __future__ import annotations

import pytest

from imexdra.common.kube.models.core_v1 import Node, NodeCondition, NodeStatus
from imexdra.common.kube.models.meta_v1 import ObjectMeta
from imexdra.controller.daemons import DaemonPod
from imexdra.controller.nodehealth import lost_daemons, not_ready_reason

LOST = NodeCondition(
    type="Ready", status="Unknown", reason="NodeStatusUnknown", message="Kubelet stopped posting node status."
)


def node(name: str, *conditions: NodeCondition) -> Node:
    return Node(metadata=ObjectMeta(name=name), status=NodeStatus(conditions=list(conditions)))


def daemon(node_name: str, *, ready: bool = False, failure: str = "") -> DaemonPod:
    return DaemonPod(
        name=f"d-{node_name}",
        domain_uid="uid",
        node_name=node_name,
        ip_address="10.0.0.1",
        clique_id="c.1",
        ready=ready,
        failure=failure,
    )


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        ((LOST,), "Unknown, NodeStatusUnknown: Kubelet stopped posting node status."),
        (
            (NodeCondition(type="Ready", status="False", reason="KubeletNotReady", message=" PLEG "),),
            "False, KubeletNotReady: PLEG",
        ),
        ((NodeCondition(type="Ready", status="Unknown"),), "Unknown"),
        ((NodeCondition(type="Ready", status="True", reason="KubeletReady"),), None),
        ((NodeCondition(type="MemoryPressure", status="True"),), None),
        ((), None),
    ],
    ids=["lost", "kubelet-not-ready", "bare-unknown", "ready", "no-ready-condition", "no-conditions"],
)
def test_not_ready_reason_reads_the_ready_condition(
    conditions: tuple[NodeCondition, ...], expected: str | None
) -> None:
    """The Ready condition's status, reason and message; None when Ready or not reported."""
    assert not_ready_reason(node("n", *conditions)) == expected


def test_not_ready_reason_of_a_node_without_status_is_none() -> None:
    """A node the kubelet has not reported on yet says nothing."""
    assert not_ready_reason(Node(metadata=ObjectMeta(name="n"))) is None


def test_lost_daemons_names_only_not_ready_daemons_on_not_ready_nodes() -> None:
    """Ready daemons, daemons with their own failure, nodes that are Ready or unknown are left out."""
    ok = NodeCondition(type="Ready", status="True")
    nodes = {
        "gb200-00": node("gb200-00", ok),
        "gb200-01": node("gb200-01", LOST),
        "gb200-02": node("gb200-02", LOST),
        "gb200-03": node("gb200-03", LOST),
        "gb200-04": node("gb200-04", ok),
    }
    members = [
        daemon("gb200-03"),
        daemon("gb200-00"),  # starting on a Ready node
        daemon("gb200-01", ready=True),  # the node's Ready flip has not reached its pod yet
        daemon("gb200-02", failure="exited with code 1"),  # DaemonFailing says why
        daemon("gb200-04"),
        daemon("gb200-05"),  # node not labelled (not in the cache)
    ]
    assert lost_daemons(members, nodes) == [
        (
            "gb200-03",
            "IMEX daemon on node gb200-03 is not ready: the node is not Ready "
            "(Unknown, NodeStatusUnknown: Kubelet stopped posting node status.)",
        )
    ]
