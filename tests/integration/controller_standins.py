"""Stand-ins for components the controller's integration tests cannot run for real.

Each does only what the real component would do.

- ``DaemonDevicePlugin`` stands in for the kubelet plugin's daemon side on a real kubelet: it publishes
  the ``daemon-0`` device in a ResourceSlice and answers NodePrepareResources for it, so the daemon
  pods the DaemonSet controller creates are scheduled, prepared and run (fakecri fakes the container
  and answers the exec probes with success, so they become Ready through the real probe path).
- ``FakeKubelet`` stands in for the kubelets of API-only nodes: it registers the nodes, keeps their
  Leases fresh, reports bound pods Running (and Ready) with an IP, and finishes terminating pods.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from lightkube import AsyncClient
from lightkube.types import PatchType

from imexdra.api.constants import DEVICE_CLASS_DAEMON, DRIVER_NAME
from imexdra.kubeletplugin._pb import dra_v1_pb2 as dra
from imexdra.kubeletplugin._pb import dra_v1_pb2_grpc as dra_grpc
from imexdra.kubeletplugin._pb import pluginregistration_v1_pb2 as reg
from imexdra.kubeletplugin._pb import pluginregistration_v1_pb2_grpc as reg_grpc


def daemon_device_class() -> dict[str, Any]:
    """Upstream's DeviceClass for daemon claims (the chart ships it)."""
    expression = f"device.driver == '{DRIVER_NAME}' && device.attributes['{DRIVER_NAME}'].type == 'daemon'"
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DEVICE_CLASS_DAEMON},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def daemon_slice(node: str, node_uid: str | None = None) -> dict[str, Any]:
    """The ResourceSlice the kubelet plugin publishes for a node's daemon device (channel omitted)."""
    meta: dict[str, Any] = {"name": f"{node}-{DRIVER_NAME}-daemon"}
    if node_uid:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": meta,
        "spec": {
            "driver": DRIVER_NAME,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "daemon-0", "attributes": {"type": {"string": "daemon"}, "id": {"int": 0}}}],
        },
    }


@dataclass
class DaemonDevicePlugin(reg_grpc.RegistrationServicer, dra_grpc.DRAPluginServicer):
    """Registers as ``compute-domain.nvidia.com`` with one real kubelet and prepares daemon claims."""

    node: str
    registry_dir: Path
    plugins_dir: Path
    registered: asyncio.Event = field(default_factory=asyncio.Event)
    prepared: list[str] = field(default_factory=list)

    @property
    def dra_socket(self) -> Path:
        return self.plugins_dir / DRIVER_NAME / "dra.sock"

    async def start(self) -> None:
        self.dra_socket.parent.mkdir(parents=True, exist_ok=True)
        self._dra = grpc.aio.server()
        dra_grpc.add_DRAPluginServicer_to_server(self, self._dra)
        self._dra.add_insecure_port(f"unix://{self.dra_socket}")
        await self._dra.start()
        self._reg = grpc.aio.server()
        reg_grpc.add_RegistrationServicer_to_server(self, self._reg)
        self._reg.add_insecure_port(f"unix://{self.registry_dir / f'{DRIVER_NAME}-reg.sock'}")
        await self._reg.start()

    async def stop(self) -> None:
        await self._reg.stop(None)
        await self._dra.stop(None)

    async def GetInfo(self, request: reg.InfoRequest, context: object) -> reg.PluginInfo:  # noqa: N802
        return reg.PluginInfo(
            type="DRAPlugin",
            name=DRIVER_NAME,
            endpoint=str(self.dra_socket),
            supported_versions=["v1.DRAPlugin"],
        )

    async def NotifyRegistrationStatus(  # noqa: N802
        self, request: reg.RegistrationStatus, context: object
    ) -> reg.RegistrationStatusResponse:
        if request.plugin_registered:
            self.registered.set()
        return reg.RegistrationStatusResponse()

    async def NodePrepareResources(  # noqa: N802
        self, request: dra.NodePrepareResourcesRequest, context: object
    ) -> dra.NodePrepareResourcesResponse:
        response = dra.NodePrepareResourcesResponse()
        for claim in request.claims:
            self.prepared.append(claim.uid)
            response.claims[claim.uid].devices.append(
                dra.Device(request_names=["daemon"], pool_name=self.node, device_name="daemon-0")
            )
        return response

    async def NodeUnprepareResources(  # noqa: N802
        self, request: dra.NodeUnprepareResourcesRequest, context: object
    ) -> dra.NodeUnprepareResourcesResponse:
        response = dra.NodeUnprepareResourcesResponse()
        for claim in request.claims:
            response.claims[claim.uid].error = ""
        return response


# -- API-only nodes --------------------------------------------------------------------------------


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

    kube: AsyncClient
    nodes: list[str]
    namespace: str
    ips: dict[str, str] = field(default_factory=dict)

    async def register(self) -> None:
        """Create the Node objects with capacity and a Ready condition, as a kubelet registers its node."""
        from lightkube.resources.core_v1 import Node

        for node in self.nodes:
            await self.kube.create(Node.from_dict(fake_node(node)))
        await self._report_nodes()

    async def _report_nodes(self) -> None:
        from lightkube.resources.coordination_v1 import Lease
        from lightkube.resources.core_v1 import Node

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
        from lightkube.resources.core_v1 import Pod

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
        from lightkube.resources.core_v1 import Pod

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
