"""API-only nodes: Node objects no kubelet runs, kept alive by ``FakeKubelet`` playing their kubelet.

``FakeKubelet`` registers the nodes, keeps their Leases fresh, reports bound pods Running (and Ready)
with an IP, and finishes terminating pods, as a kubelet would. The controller's integration tests and
the job-start benchmark's node simulator (``bench/daemonsim.py``) both stand on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from imexdra.common.kube.api import KubeApi, PatchType
from imexdra.common.kube.models.coordination_v1 import Lease
from imexdra.common.kube.models.core_v1 import Node, Pod

#: A kubelet's default node Lease duration.
NODE_LEASE_SECONDS = 40


def node_lease(node: str, duration_seconds: int, renew_time: str) -> dict[str, Any]:
    """The node heartbeat Lease a kubelet keeps in ``kube-node-lease`` (``renew_time``: a MicroTime)."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": node, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": node, "leaseDurationSeconds": duration_seconds, "renewTime": renew_time},
    }


def fake_node(name: str) -> dict[str, Any]:
    """A Node object no kubelet runs (its status is reported by ``FakeKubelet``)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
    }


@dataclass
class FakeKubelet:
    """Plays the kubelet of API-only nodes: node status and Lease heartbeats, pod status, pod removal."""

    kube: KubeApi
    nodes: list[str]
    namespace: str
    ips: dict[str, str] = field(default_factory=dict)

    async def register(self) -> None:
        """Create the Node objects with capacity and a Ready condition, as a kubelet registers its node."""
        for node in self.nodes:
            await self.kube.create(Node.from_dict(fake_node(node)))
        await self._report_nodes()

    async def _report_nodes(self) -> None:
        now = dt.datetime.now(dt.UTC)
        stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
        capacity = {"cpu": "8", "memory": "32Gi", "pods": "110"}
        for node in self.nodes:
            ready = {"type": "Ready", "status": "True", "reason": "KubeletReady"}
            ready |= {"lastHeartbeatTime": stamp, "lastTransitionTime": stamp}
            status = {"capacity": capacity, "allocatable": capacity, "conditions": [ready]}
            await self.kube.patch(Node.Status, node, {"status": status}, patch_type=PatchType.STRATEGIC)
            lease = node_lease(node, NODE_LEASE_SECONDS, now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"))
            await self.kube.patch(
                Lease, node, lease, namespace="kube-node-lease", patch_type=PatchType.APPLY, force=True
            )

    async def run(self) -> None:
        """Heartbeat every few seconds and finish terminating pods on our nodes (grace period 0)."""
        while True:
            with contextlib.suppress(Exception):
                await self._report_nodes()
            for _ in range(5):
                async for pod in self.kube.list(Pod, namespace=self.namespace):
                    meta, spec = pod.metadata, pod.spec
                    if meta and meta.name and meta.deletionTimestamp and spec and spec.nodeName in self.nodes:
                        with contextlib.suppress(Exception):
                            await self.kube.delete(Pod, meta.name, namespace=self.namespace, grace_period=0)
                await asyncio.sleep(1.0)

    async def report_pod(self, name: str, node: str, *, ready: bool) -> str:
        """Report the pod Running with an IP, Ready or not; return the IP."""
        ip = self.ips.setdefault(node, f"10.244.{len(self.ips) // 250}.{len(self.ips) % 250 + 1}")
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        state = "True" if ready else "False"
        conditions = [
            {
                "type": kind,
                "status": "True" if kind in ("PodScheduled", "Initialized") else state,
                "lastTransitionTime": now,
            }
            for kind in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
        ]
        status = {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}], "hostIP": ip, "startTime": now}
        status["conditions"] = conditions
        await self.kube.patch(
            Pod.Status, name, {"status": status}, namespace=self.namespace, patch_type=PatchType.MERGE
        )
        return ip
