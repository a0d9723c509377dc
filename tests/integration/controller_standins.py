"""Stand-ins for components the controller's integration tests cannot run for real.

Each does only what the real component would do.

- ``DaemonDevicePlugin`` stands in for the kubelet plugin's daemon side on a real kubelet: it publishes
  the ``daemon-0`` device in a ResourceSlice and answers NodePrepareResources for it, so the daemon
  pods the DaemonSet controller creates are scheduled, prepared and run (fakecri fakes the container
  and answers the exec probes with success, so they become Ready through the real probe path).
- ``publish_daemon_devices`` publishes ``imexdra_sim.builders.daemon_slice`` (the ResourceSlice the
  plugin would publish for a node's daemon device) with the DeviceClass, as a fresh plugin would.

The kubelets of API-only nodes are ``imexdra_sim.apinodes.FakeKubelet`` (the benchmarks use it too).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from grpclib.server import Stream

from imexdra.api.constants import DRIVER_NAME
from imexdra.dra._pb import dra_v1_grpc as dra_grpc
from imexdra.dra._pb import dra_v1_pb2 as dra
from imexdra.dra._pb import pluginregistration_v1_grpc as reg_grpc
from imexdra.dra._pb import pluginregistration_v1_pb2 as reg
from imexdra.dra.grpcserver import unary_request
from imexdra_sim.builders import daemon_device_class, daemon_slice
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.integration.pluginharness import remove_slices
from tests.support.grpcserving import serve_unix, stop_unix
from tests.support.kubectl import apply


def publish_daemon_devices(
    cluster: LocalCluster, nodes: Sequence[str], node_uids: Mapping[str, str] | None = None
) -> None:
    """The daemon DeviceClass and each node's daemon slice, on nodes cleared of the driver's slices.

    An earlier module's real plugin may have left its pool on a node (under channel isolation, 16
    slices at a later generation); the scheduler reads only a pool's newest generation, so the
    stand-in's slice (generation 1) beside it would never be allocated from.
    """
    for node in nodes:
        remove_slices(cluster, node)
    apply(cluster, daemon_device_class(), *(daemon_slice(n, (node_uids or {}).get(n)) for n in nodes))


@dataclass
class DaemonDevicePlugin(reg_grpc.RegistrationBase, dra_grpc.DRAPluginBase):
    """Registers as ``compute-domain.nvidia.com`` with one real kubelet and prepares daemon claims."""

    node: str
    registry_dir: Path
    plugins_dir: Path
    registered: asyncio.Event = field(default_factory=asyncio.Event)
    prepared: list[str] = field(default_factory=list)

    @property
    def dra_socket(self) -> Path:
        return self.plugins_dir / DRIVER_NAME / "dra.sock"

    @property
    def registration_socket(self) -> Path:
        return self.registry_dir / f"{DRIVER_NAME}-reg.sock"

    async def start(self) -> None:
        self.dra_socket.parent.mkdir(parents=True, exist_ok=True)
        self._dra = await serve_unix(self, dra_grpc.DRAPluginBase, self.dra_socket)
        self._reg = await serve_unix(self, reg_grpc.RegistrationBase, self.registration_socket)

    async def stop(self) -> None:
        await stop_unix(self._reg, self.registration_socket)
        await stop_unix(self._dra, self.dra_socket)

    async def GetInfo(self, stream: Stream[reg.InfoRequest, reg.PluginInfo]) -> None:  # noqa: N802
        await unary_request(stream)
        await stream.send_message(
            reg.PluginInfo(
                type="DRAPlugin",
                name=DRIVER_NAME,
                endpoint=str(self.dra_socket),
                supported_versions=["v1.DRAPlugin"],
            )
        )

    async def NotifyRegistrationStatus(  # noqa: N802
        self, stream: Stream[reg.RegistrationStatus, reg.RegistrationStatusResponse]
    ) -> None:
        request = await unary_request(stream)
        if request.plugin_registered:
            self.registered.set()
        await stream.send_message(reg.RegistrationStatusResponse())

    async def NodePrepareResources(  # noqa: N802
        self, stream: Stream[dra.NodePrepareResourcesRequest, dra.NodePrepareResourcesResponse]
    ) -> None:
        request = await unary_request(stream)
        response = dra.NodePrepareResourcesResponse()
        for claim in request.claims:
            self.prepared.append(claim.uid)
            response.claims[claim.uid].devices.append(
                dra.Device(request_names=["daemon"], pool_name=self.node, device_name="daemon-0")
            )
        await stream.send_message(response)

    async def NodeUnprepareResources(  # noqa: N802
        self, stream: Stream[dra.NodeUnprepareResourcesRequest, dra.NodeUnprepareResourcesResponse]
    ) -> None:
        request = await unary_request(stream)
        response = dra.NodeUnprepareResourcesResponse()
        for claim in request.claims:
            response.claims[claim.uid].error = ""
        await stream.send_message(response)
