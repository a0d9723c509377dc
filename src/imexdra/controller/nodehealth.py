"""Why a node's IMEX daemon is not ready when the daemon cannot say so itself: its node is not Ready.

A node that loses power, or its kubelet, goes silent. After kube-controller-manager's
``--node-monitor-grace-period`` the node lifecycle controller sets the node's ``Ready`` condition to
``Unknown`` and the ``Ready`` condition of its pods to ``False``. The daemon pod's containers still
show running and ready (their last report), so ``daemons.DaemonPod.failure`` is empty: the reason is
on the Node. The controller watches the nodes labelled for a domain (``caches``), so it can say which
node and why (a ``NodeNotReady`` Warning Event on the ComputeDomain, docs/node-loss.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from imexdra.common.kube.models.core_v1 import Node
from imexdra.controller.daemons import DaemonPod


def not_ready_reason(node: Node) -> str | None:
    """Why ``node`` is not Ready, as its ``Ready`` condition says; None if Ready or not reported yet.

    E.g. ``Unknown, NodeStatusUnknown: Kubelet stopped posting node status.`` (a lost node).
    """
    conditions = node.status.conditions if node.status is not None else None
    ready = next((c for c in conditions or () if c.type == "Ready"), None)
    if ready is None or ready.status == "True":
        return None
    detail = ": ".join(part for part in (ready.reason, (ready.message or "").strip()) if part)
    return f"{ready.status}, {detail}" if detail else ready.status


def lost_daemons(members: Iterable[DaemonPod], nodes: Mapping[str, Node]) -> list[tuple[str, str]]:
    """``(node name, note)`` for each not-ready daemon whose node is not Ready, by node name.

    A daemon with a failure of its own is left to ``DaemonFailing``; one whose node is Ready is
    starting or probing, which says nothing about the node.
    """
    found = []
    for member in sorted(members, key=lambda m: m.node_name):
        node = nodes.get(member.node_name)
        if member.ready or member.failure or node is None:
            continue
        reason = not_ready_reason(node)
        if reason is not None:
            note = f"IMEX daemon on node {member.node_name} is not ready: the node is not Ready ({reason})"
            found.append((member.node_name, note))
    return found
