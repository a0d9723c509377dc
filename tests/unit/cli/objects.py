"""Realistic API objects for the CLI report tests, built from the dicts the API server returns."""

from __future__ import annotations

from typing import Any

from imexdra.api.computedomain import ComputeDomain
from imexdra.api.computedomainclique import ComputeDomainClique
from imexdra.cli.clusterview import ImexMode
from imexdra.cli.diagnose import DomainView
from imexdra.cli.status import Snapshot
from imexdra.common.kube.models.apps_v1 import DaemonSet
from imexdra.common.kube.models.core_v1 import Event, Node, Pod
from imexdra.common.kube.models.resource_v1 import DeviceClass, ResourceClaim, ResourceClaimTemplate

DRIVER_NS = "imexdra"
UID = "5b1c8a4e-0000-4000-8000-000000000001"
OTHER_UID = "9f2d7c1a-0000-4000-8000-000000000002"
CLIQUE = "0f4b3a2e-1c2d-4e5f-8a9b-0c1d2e3f4a5b.1"


def domain(
    name: str = "train",
    namespace: str = "team-a",
    *,
    uid: str = UID,
    num_nodes: int = 2,
    mode: str = "Single",
    status: dict[str, Any] | None = None,
    deleting: bool = False,
) -> ComputeDomain:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid,
        "creationTimestamp": "2026-03-01T10:00:00Z",
        "finalizers": ["resource.nvidia.com/computeDomain"],
    }
    if deleting:
        metadata["deletionTimestamp"] = "2026-03-01T11:00:00Z"
    raw: dict[str, Any] = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": metadata,
        "spec": {
            "numNodes": num_nodes,
            "channel": {"resourceClaimTemplate": {"name": f"{name}-channel"}, "allocationMode": mode},
        },
    }
    if status is not None:
        raw["status"] = status
    return ComputeDomain.from_dict(raw)


def status_node(name: str, index: int, ready: bool = True) -> dict[str, Any]:
    return {
        "name": name,
        "ipAddress": f"10.0.0.{index + 10}",
        "cliqueID": CLIQUE,
        "index": index,
        "status": "Ready" if ready else "NotReady",
    }


def clique(
    uid: str = UID, *, nodes: tuple[str, ...] = ("node-b", "node-a"), labelled: bool = True
) -> ComputeDomainClique:
    labels = {"resource.nvidia.com/computeDomain": uid, "resource.nvidia.com/computeDomain.cliqueID": CLIQUE}
    return ComputeDomainClique.from_dict(
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomainClique",
            "metadata": {
                "name": f"{uid}.{CLIQUE}",
                "namespace": DRIVER_NS,
                **({"labels": labels} if labelled else {}),
            },
            "daemons": [
                {
                    "nodeName": node,
                    "ipAddress": f"10.0.1.{i}",
                    "cliqueID": CLIQUE,
                    "index": len(nodes) - 1 - i,
                    "status": "Ready",
                }
                for i, node in enumerate(nodes)
            ],
        }
    )


def node(name: str, labels: dict[str, str] | None = None, ready: tuple[str, str, str] | None = None) -> Node:
    """A Node; ``ready`` is its Ready condition as (status, reason, message), none when omitted."""
    raw: dict[str, Any] = {"metadata": {"name": name, "labels": labels or {}}}
    if ready is not None:
        status, reason, message = ready
        raw["status"] = {
            "conditions": [{"type": "Ready", "status": status, "reason": reason, "message": message}]
        }
    return Node.from_dict(raw)


def gpu_node(
    name: str,
    *,
    clique_label: bool = True,
    domain_uid: str | None = None,
    ready: tuple[str, str, str] | None = None,
) -> Node:
    labels = {"nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-GB200"}
    if clique_label:
        labels["nvidia.com/gpu.clique"] = CLIQUE
    if domain_uid:
        labels["resource.nvidia.com/computeDomain"] = domain_uid
    return node(name, labels, ready)


def channel_config(uid: str = UID, mode: str = "Single") -> dict[str, Any]:
    return {
        "source": "FromClaim",
        "requests": ["channel"],
        "opaque": {
            "driver": "compute-domain.nvidia.com",
            "parameters": {
                "apiVersion": "resource.nvidia.com/v1beta1",
                "kind": "ComputeDomainChannelConfig",
                "domainID": uid,
                "allocationMode": mode,
            },
        },
    }


def claim(
    name: str,
    namespace: str = "team-a",
    *,
    driver: str = "compute-domain.nvidia.com",
    device: str = "channel-0",
    node_name: str | None = "node-a",
    reserved_for: tuple[tuple[str, str], ...] = (),
    uid: str = UID,
    allocated: bool = True,
) -> ResourceClaim:
    raw: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": f"claim-{name}"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "channel",
                        "exactly": {"deviceClassName": "compute-domain-default-channel.nvidia.com"},
                    }
                ],
                "config": [{"requests": ["channel"], "opaque": channel_config(uid)["opaque"]}],
            }
        },
    }
    if allocated:
        allocation: dict[str, Any] = {
            "devices": {
                "results": [
                    {"request": "channel", "driver": driver, "pool": node_name or "pool-x", "device": device}
                ],
                "config": [channel_config(uid)],
            }
        }
        if node_name:
            allocation["nodeSelector"] = {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
                ]
            }
        raw["status"] = {
            "allocation": allocation,
            "reservedFor": [
                {"resource": "pods", "name": pod, "uid": pod_uid} for pod, pod_uid in reserved_for
            ],
        }
    return ResourceClaim.from_dict(raw)


def pod(
    name: str,
    namespace: str = "team-a",
    *,
    template: str | None = "train-channel",
    claim_name: str | None = None,
    node_name: str | None = None,
    phase: str = "Pending",
    waiting: str | None = None,
    ready: bool = False,
    labels: dict[str, str] | None = None,
    claim_status: str | None = None,
) -> Pod:
    """A workload pod with claim ``imex`` from ``template`` (or naming ``claim_name``); ``claim_status``
    is the name of the claim the resourceclaim controller generated for it."""
    claims = []
    if template:
        claims.append({"name": "imex", "resourceClaimTemplateName": template})
    if claim_name:
        claims.append({"name": "imex", "resourceClaimName": claim_name})
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
    }
    if claim_status:
        status["resourceClaimStatuses"] = [{"name": "imex", "resourceClaimName": claim_status}]
    if waiting:
        status["containerStatuses"] = [
            {
                "name": "main",
                "image": "busybox",
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {"waiting": {"reason": waiting}},
            }
        ]
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox"}], "resourceClaims": claims}
    if node_name:
        spec["nodeName"] = node_name
    return Pod.from_dict(
        {
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "labels": labels or {}},
            "spec": spec,
            "status": status,
        }
    )


def event(
    pod_name: str,
    reason: str,
    message: str,
    at: str,
    *,
    pod_uid: str | None = None,
    namespace: str = "team-a",
) -> Event:
    return Event.from_dict(
        {
            "metadata": {"name": f"{pod_name}.{reason}.{at}", "namespace": namespace},
            "involvedObject": {
                "kind": "Pod",
                "name": pod_name,
                "namespace": namespace,
                "uid": pod_uid if pod_uid is not None else f"uid-{pod_name}",
            },
            "reason": reason,
            "message": message,
            "type": "Warning",
            "lastTimestamp": at,
        }
    )


def daemonset(uid: str = UID) -> DaemonSet:
    return DaemonSet.from_dict(
        {
            "metadata": {
                "name": f"computedomain-daemon-{uid}",
                "namespace": DRIVER_NS,
                "labels": {"resource.nvidia.com/computeDomain": uid},
            },
            "spec": {
                "selector": {"matchLabels": {"resource.nvidia.com/computeDomain": uid}},
                "template": {"spec": {"containers": [{"name": "daemon", "image": "imexdra"}]}},
            },
        }
    )


def snapshot() -> Snapshot:
    """What ``status`` fetches from a small healthy cluster: one Ready domain, its clique, two nodes
    (one GPU node labelled for the domain) and one reserved claim."""
    cd = domain(status={"status": "Ready", "nodes": [status_node("node-a", 0), status_node("node-b", 1)]})
    return Snapshot(
        driver_namespace=DRIVER_NS,
        imex_mode=ImexMode.DRIVER_MANAGED,
        domains=[cd],
        cliques=[clique()],
        nodes=[gpu_node("node-a", domain_uid=UID), node("infra")],
        claims=[claim("worker-0-imex", reserved_for=(("worker-0", "uid-worker-0"),))],
    )


def claim_template(
    name: str = "train-channel",
    namespace: str = "team-a",
    *,
    device_class: str = "compute-domain-default-channel.nvidia.com",
    parameters: dict[str, Any] | None = None,
    uid: str | None = UID,
) -> ResourceClaimTemplate:
    """A workload claim template as the controller renders it for ``uid`` (no config when both are None);
    ``parameters`` replaces the opaque config's parameters."""
    devices: dict[str, Any] = {
        "requests": [{"name": "channel", "exactly": {"deviceClassName": device_class}}]
    }
    if parameters is not None or uid is not None:
        opaque = channel_config(uid or "")["opaque"]
        if parameters is not None:
            opaque = {**opaque, "parameters": parameters}
        devices["config"] = [{"requests": ["channel"], "opaque": opaque}]
    return ResourceClaimTemplate.from_dict(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"spec": {"devices": devices}},
        }
    )


def device_class(name: str, expression: str | None = None) -> DeviceClass:
    """A DeviceClass; the chart's select on ``device.driver`` in CEL."""
    cel = expression or "device.driver == 'compute-domain.nvidia.com'"
    return DeviceClass.from_dict(
        {"metadata": {"name": name}, "spec": {"selectors": [{"cel": {"expression": cel}}]}}
    )


def chart_device_classes() -> list[DeviceClass]:
    """The DeviceClasses a driver-managed install has, plus an unrelated GPU class."""
    return [
        device_class("compute-domain-default-channel.nvidia.com"),
        device_class("compute-domain-daemon.nvidia.com"),
        device_class("gpu.nvidia.com", "device.driver == 'gpu.nvidia.com'"),
    ]


READY_STATUS = {"status": "Ready", "nodes": [status_node("node-a", 0), status_node("node-b", 1)]}


def view(**overrides: Any) -> DomainView:
    """A healthy driver-managed domain with two Running workload pods, changed by ``overrides``."""
    fields: dict[str, Any] = {
        "domain": domain(status=READY_STATUS),
        "imex_mode": ImexMode.DRIVER_MANAGED,
        "driver_namespace": DRIVER_NS,
        "daemonsets": [daemonset()],
        "daemon_pods": [
            pod("cd-daemon-a", DRIVER_NS, template=None, node_name="node-a", phase="Running", ready=True)
        ],
        "pods": [
            pod(f"worker-{i}", node_name=f"node-{n}", phase="Running", ready=True) for i, n in enumerate("ab")
        ],
        "nodes": {n: gpu_node(n, domain_uid=UID) for n in ("node-a", "node-b", "node-c")},
    }
    fields.update(overrides)
    return DomainView(**fields)
