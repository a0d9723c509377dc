"""``imexdra status``: one read-only picture of ComputeDomains, cliques, GPU nodes and prepared channels.

:func:`fetch_snapshot` is the only part that talks to the API server; :func:`build_report` turns the
fetched objects into a JSON-ready document with stable keys (what ``-o json`` prints and tests assert
on) and :func:`render_text` lays the same document out as aligned tables.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from imexdra.api.computedomain import ComputeDomain, Condition
from imexdra.api.computedomainclique import ComputeDomainClique
from imexdra.api.constants import (
    CLIQUE_LABEL_KEY,
    GPU_CLIQUE_NODE_LABEL_KEY,
    NODE_LABEL_KEY,
    ComputeDomainStatusValue,
)
from imexdra.api.imexpeers import IMEX_PEERS_CONNECTED
from imexdra.cli.clusterview import (
    ImexMode,
    claim_domain_uid,
    claim_node,
    detect_imex_mode,
    domain_uid_label,
    driver_devices,
    format_table,
    get_or_none,
    key_of,
    labels_of,
    list_all,
    meta,
    name_of,
    reserved_pods,
)
from imexdra.cli.imexpeers import peers_json, peers_text
from imexdra.common.kube.api import ALL_NAMESPACES, KubeApi
from imexdra.common.kube.models.core_v1 import Node, Pod
from imexdra.common.kube.models.resource_v1 import ResourceClaim
from imexdra.controller.nodehealth import not_ready_reason

#: GPU Feature Discovery's marker of a GPU node.
GPU_PRESENT_LABEL_KEY = "nvidia.com/gpu.present"

Report = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything ``status`` shows, as fetched."""

    driver_namespace: str
    imex_mode: ImexMode
    domains: Sequence[ComputeDomain] = ()
    cliques: Sequence[ComputeDomainClique] = ()
    nodes: Sequence[Node] = ()
    claims: Sequence[ResourceClaim] = ()
    #: Pods named in claims' ``reservedFor``, by UID (to find the node of a claim without a selector).
    pods: Mapping[str, Pod] = field(default_factory=dict)


async def fetch_snapshot(client: KubeApi, *, namespace: str | None, driver_namespace: str) -> Snapshot:
    """Read the objects ``status`` reports; ``namespace=None`` means all namespaces."""
    scope = namespace if namespace is not None else ALL_NAMESPACES
    claims = [c for c in await list_all(client, ResourceClaim, namespace=scope) if driver_devices(c)]
    pods: dict[str, Pod] = {}
    for claim in claims:
        if claim_node(claim, {}) is not None:
            continue
        for consumer in reserved_pods(claim):
            pod = await get_or_none(client, Pod, consumer.name, meta(claim).namespace or "")
            if pod is not None and meta(pod).uid == consumer.uid:
                pods[consumer.uid] = pod
    return Snapshot(
        driver_namespace=driver_namespace,
        imex_mode=await detect_imex_mode(client),
        domains=await list_all(client, ComputeDomain, namespace=scope),
        cliques=await list_all(client, ComputeDomainClique, namespace=driver_namespace),
        nodes=await list_all(client, Node),
        claims=claims,
        pods=pods,
    )


def build_report(snapshot: Snapshot) -> Report:
    """The JSON document of ``status -o json``."""
    domain_keys = {uid: key_of(d) for d in snapshot.domains if (uid := meta(d).uid)}
    return {
        "driverNamespace": snapshot.driver_namespace,
        "imexMode": str(snapshot.imex_mode),
        "computeDomains": [domain_row(d, snapshot.cliques) for d in _sorted(snapshot.domains)],
        "nodes": node_rows(snapshot.nodes, domain_keys),
        "channels": channel_rows(snapshot.claims, snapshot.pods, domain_keys),
    }


def _sorted(objects: Iterable[Any]) -> list[Any]:
    return sorted(objects, key=key_of)


def domain_row(domain: ComputeDomain, cliques: Iterable[ComputeDomainClique]) -> Report:
    """One ComputeDomain with its cliques (matched by label, else by the ``<uid>.`` name prefix)."""
    metadata, spec, status = meta(domain), domain.spec, domain.status
    uid = metadata.uid or ""
    own = [c for c in cliques if uid and (domain_uid_label(c) or name_of(c).split(".", 1)[0]) == uid]
    return {
        "namespace": metadata.namespace,
        "name": metadata.name,
        "uid": uid,
        "status": str(status.status) if status is not None else None,
        "numNodes": spec.num_nodes if spec is not None else 0,
        "allocationMode": str(spec.channel.allocation_mode) if spec is not None else None,
        "resourceClaimTemplate": spec.channel.resource_claim_template.name if spec is not None else None,
        "nodeCount": len(status.nodes) if status is not None else 0,
        #: The domain's own IMEX channel under channel isolation (docs/channel-isolation.md §2), else None.
        "channel": status.channel if status is not None else None,
        "deleting": metadata.deletionTimestamp is not None,
        #: ``IMEXPeersConnected`` (docs/imex-health.md): True, False or Unknown; None before any report.
        "imexPeersConnected": str(peers.status) if (peers := _peers_condition(domain)) is not None else None,
        "cliques": [clique_row(c) for c in _sorted(own)],
    }


def _peers_condition(domain: ComputeDomain) -> Condition | None:
    return domain.status.condition(IMEX_PEERS_CONNECTED) if domain.status is not None else None


def clique_row(clique: ComputeDomainClique) -> Report:
    """One clique and its daemons, ordered by index then node."""
    daemons = sorted(clique.daemons, key=lambda d: (d.index, d.node_name))
    return {
        "name": name_of(clique),
        "cliqueID": labels_of(clique).get(CLIQUE_LABEL_KEY) or (daemons[0].clique_id if daemons else ""),
        "daemons": [
            {
                "nodeName": d.node_name,
                "ipAddress": d.ip_address,
                "cliqueID": d.clique_id,
                "index": d.index,
                "status": str(d.status),
                "imexPeers": peers_json(d),
            }
            for d in daemons
        ],
    }


def is_gpu_node(node: Node) -> bool:
    """GPU Feature Discovery marked it, or it carries a GPU clique or ComputeDomain label."""
    labels = labels_of(node)
    return labels.get(GPU_PRESENT_LABEL_KEY) == "true" or any(
        key in labels for key in (GPU_CLIQUE_NODE_LABEL_KEY, NODE_LABEL_KEY)
    )


def node_rows(nodes: Iterable[Node], domain_keys: Mapping[str, str]) -> list[Report]:
    """GPU nodes with their clique label, the ComputeDomain (UID and, if known, name) using them.

    ``notReady`` says why a node is not Ready (a lost node: ``Unknown, NodeStatusUnknown: ...``), else None.
    """
    rows = []
    for node in sorted((n for n in nodes if is_gpu_node(n)), key=name_of):
        labels = labels_of(node)
        uid = labels.get(NODE_LABEL_KEY)
        rows.append(
            {
                "name": name_of(node),
                "gpuClique": labels.get(GPU_CLIQUE_NODE_LABEL_KEY),
                "computeDomainUID": uid,
                "computeDomain": domain_keys.get(uid) if uid else None,
                "notReady": not_ready_reason(node),
            }
        )
    return rows


def channel_rows(
    claims: Iterable[ResourceClaim], pods: Mapping[str, Pod], domain_keys: Mapping[str, str]
) -> list[Report]:
    """ResourceClaims holding devices of our driver: devices, node, consumers and owning domain."""
    rows = []
    for claim in _sorted(claims):
        devices = driver_devices(claim)
        if not devices:
            continue
        uid = claim_domain_uid(claim)
        rows.append(
            {
                "namespace": meta(claim).namespace,
                "name": name_of(claim),
                "devices": devices,
                "node": claim_node(claim, pods),
                "reservedFor": sorted(c.name for c in reserved_pods(claim)),
                "computeDomainUID": uid,
                "computeDomain": domain_keys.get(uid) if uid else None,
            }
        )
    return rows


def render_text(report: Report, *, wide: bool = False) -> str:
    """Aligned tables of the report, one section per kind; ``wide`` adds the ComputeDomain UIDs."""
    domains = report["computeDomains"]
    uid = ["UID"] if wide else []
    domain_uid = ["COMPUTE DOMAIN UID"] if wide else []
    domain_table = format_table(
        [
            "NAMESPACE/NAME",
            "STATUS",
            "NUMNODES",
            "NODES",
            "MODE",
            "CHANNEL",
            "CHANNEL TEMPLATE",
            "IMEX PEERS",
            *uid,
        ],
        (
            [
                _key(d),
                _status_text(d),
                d["numNodes"],
                d["nodeCount"],
                d["allocationMode"],
                "-" if d["channel"] is None else d["channel"],
                d["resourceClaimTemplate"],
                d["imexPeersConnected"] or "-",
                *([d["uid"]] if wide else []),
            ]
            for d in domains
        ),
    )
    clique_table = format_table(
        ["DOMAIN", "CLIQUE", "INDEX", "NODE", "IP", "STATUS", "IMEX PEERS"],
        (
            [
                _key(d),
                m["cliqueID"],
                m["index"],
                m["nodeName"],
                m["ipAddress"],
                m["status"],
                peers_text(m["imexPeers"]),
            ]
            for d in domains
            for clique in d["cliques"]
            for m in clique["daemons"]
        ),
    )
    node_table = format_table(
        ["NODE", "READY", "GPU CLIQUE", "COMPUTE DOMAIN", *domain_uid],
        (
            [
                n["name"],
                n["notReady"] or "True",
                n["gpuClique"],
                _domain_text(n),
                *([n["computeDomainUID"]] if wide else []),
            ]
            for n in report["nodes"]
        ),
    )
    channel_table = format_table(
        ["NAMESPACE/CLAIM", "DEVICES", "NODE", "RESERVED FOR", "COMPUTE DOMAIN", *domain_uid],
        (
            [
                _key(c),
                ",".join(c["devices"]),
                c["node"],
                ",".join(c["reservedFor"]),
                _domain_text(c),
                *([c["computeDomainUID"]] if wide else []),
            ]
            for c in report["channels"]
        ),
    )
    return "\n\n".join(
        [
            f"IMEX mode: {report['imexMode']} (driver namespace {report['driverNamespace']})",
            f"COMPUTE DOMAINS\n{domain_table}",
            f"CLIQUES\n{clique_table}",
            f"GPU NODES\n{node_table}",
            f"PREPARED CHANNELS\n{channel_table}",
        ]
    )


def _key(row: Report) -> str:
    return f"{row['namespace']}/{row['name']}"


def _domain_text(row: Report) -> str | None:
    name: str | None = row["computeDomain"] or row["computeDomainUID"]
    return name


def _status_text(row: Report) -> str:
    status = row["status"] or f"{ComputeDomainStatusValue.NOT_READY} (no status yet)"
    return f"{status} (deleting)" if row["deleting"] else status
