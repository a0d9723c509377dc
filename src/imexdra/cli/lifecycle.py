"""``imexdra diagnose``: a domain held in use while being deleted, and nodes of the domain that are lost.

Two states that look like a hang but are the driver and Kubernetes doing their job:

- **In use** (docs/in-use-protection.md): a deleted ComputeDomain stays Terminating, with its
  template, daemons and channel, while claims configured for it are reserved for pods
  (``status.reservedFor``), as the controller's ``InUse`` event says. The finding names the pods and
  says how to end it: delete the workload, or opt out of the protection.
- **Lost node** (docs/node-loss.md): a node the domain's pods or IMEX daemons run on whose ``Ready``
  condition is not True. The finding gives the node's condition and what happens next.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from imexdra.api.computedomain import ComputeDomain
from imexdra.cli.clusterview import claim_domain_uid, key_of, meta, pod_node, reserved_pods
from imexdra.cli.findings import Finding, Severity
from imexdra.common.kube.models.core_v1 import Node, Pod
from imexdra.common.kube.models.resource_v1 import ResourceClaim
from imexdra.common.machinery.events import and_more
from imexdra.controller import reasons


def in_use_findings(domain: ComputeDomain, claims: Iterable[ResourceClaim]) -> list[Finding]:
    """A Terminating domain whose claims are still reserved for pods: which pods, and what to do."""
    metadata = meta(domain)
    if metadata.deletionTimestamp is None or not metadata.uid:
        return []
    pods = sorted(
        {
            f"{meta(claim).namespace}/{consumer.name}"
            for claim in claims
            if claim_domain_uid(claim) == metadata.uid
            for consumer in reserved_pods(claim)
        }
    )
    if not pods:
        return []
    named = and_more(pods[: reasons.IN_USE_PODS_NAMED], len(pods))
    return [
        Finding(
            Severity.WARNING,
            f"deletion waits for {len(pods)} pod(s) still holding the domain's channel: {named}",
            "in-use protection keeps the domain, its daemons and its channel until those pods are gone: "
            "delete the workload that makes them (a Job, MPIJob or Deployment would make new ones); "
            "to tear down at once under running pods as upstream does, set "
            "resources.computeDomains.inUseProtection=false",
        )
    ]


def lost_node_findings(
    pods: Sequence[Pod], daemon_pods: Sequence[Pod], nodes: Mapping[str, Node] | None
) -> list[Finding]:
    """Nodes of the domain's workload or daemon pods whose Ready condition is not True.

    Nothing when the nodes were not read.
    """
    if nodes is None:
        return []
    on_node: dict[str, list[str]] = {}
    for pod in [*pods, *daemon_pods]:
        node_name = pod_node(pod)
        if node_name:
            on_node.setdefault(node_name, []).append(key_of(pod))
    findings = []
    for node_name, keys in sorted(on_node.items()):
        node = nodes.get(node_name)
        condition = _ready_condition(node) if node is not None else None
        if condition is None or condition[0] == "True":
            continue
        state = f"not Ready ({', '.join(part for part in condition if part)})"
        findings.append(
            Finding(
                Severity.WARNING,
                f"node {node_name} is {state}; pods of the domain on it: {', '.join(sorted(keys))}",
                "a lost node's workload pods are evicted once their toleration of the unreachable taint "
                "runs out (300 s by default) and their workload makes new ones elsewhere; the domain's "
                "other nodes keep their IMEX connections; when the node comes back, its stale claims "
                "are cleaned up (docs/node-loss.md in the imexdra repository)",
            )
        )
    return findings


def _ready_condition(node: Node) -> tuple[str, str, str] | None:
    """The node's Ready condition as (status, reason, message), if it reports one."""
    for condition in (node.status.conditions if node.status is not None else None) or []:
        if condition.type == "Ready":
            return condition.status, condition.reason or "", condition.message or ""
    return None
