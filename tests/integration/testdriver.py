"""A minimal test-only DRA driver: real plugin registration and DRA v1 gRPC on a node's kubelet sockets.

It exists to prove the cluster's DRA path end to end independently of imexdra's own plugin: the
kubelet discovers it, the scheduler allocates its device, the kubelet calls NodePrepareResources and
passes the returned CDI ID to the runtime, and NodeUnprepareResources follows pod deletion.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from imexdra.dra._pb import dra_v1_pb2 as dra
from imexdra.dra._pb import dra_v1_pb2_grpc as dra_grpc
from imexdra.dra._pb import pluginregistration_v1_pb2 as reg
from imexdra.dra._pb import pluginregistration_v1_pb2_grpc as reg_grpc

DRIVER = "test.imexdra.dev"


def cdi_id(device: str) -> str:
    """The CDI device ID this driver hands out for ``device``."""
    return f"{DRIVER}/test={device}"


@dataclass
class TestDriver(reg_grpc.RegistrationServicer, dra_grpc.DRAPluginServicer):
    """Serves one node; records every call it receives."""

    __test__ = False  # a helper, not a test class

    node: str
    registry_dir: Path
    plugins_dir: Path
    device: str = "dev-0"
    registrations: list[reg.RegistrationStatus] = field(default_factory=list)
    prepared: list[str] = field(default_factory=list)
    unprepared: list[str] = field(default_factory=list)
    registered: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def dra_socket(self) -> Path:
        """Path of the DRA node-service socket."""
        return self.plugins_dir / DRIVER / "dra.sock"

    @property
    def registration_socket(self) -> Path:
        """Path of the registration socket the kubelet watches for."""
        return self.registry_dir / f"{DRIVER}-reg.sock"

    async def start(self) -> None:
        """Serve the DRA socket first, then the registration socket (the kubelet dials on discovery)."""
        self.dra_socket.parent.mkdir(parents=True, exist_ok=True)
        self._dra_server = grpc.aio.server()
        dra_grpc.add_DRAPluginServicer_to_server(self, self._dra_server)
        self._dra_server.add_insecure_port(f"unix://{self.dra_socket}")
        await self._dra_server.start()
        self._reg_server = grpc.aio.server()
        reg_grpc.add_RegistrationServicer_to_server(self, self._reg_server)
        self._reg_server.add_insecure_port(f"unix://{self.registration_socket}")
        await self._reg_server.start()

    async def stop(self) -> None:
        """Stop both servers; grpc removes the socket files, which deregisters the plugin."""
        await self._reg_server.stop(None)
        await self._dra_server.stop(None)

    async def GetInfo(self, request: reg.InfoRequest, context: object) -> reg.PluginInfo:  # noqa: N802
        """Answer the kubelet's discovery call."""
        return reg.PluginInfo(
            type="DRAPlugin", name=DRIVER, endpoint=str(self.dra_socket), supported_versions=["v1.DRAPlugin"]
        )

    async def NotifyRegistrationStatus(  # noqa: N802
        self, request: reg.RegistrationStatus, context: object
    ) -> reg.RegistrationStatusResponse:
        """Record the kubelet's verdict on our registration."""
        self.registrations.append(request)
        if request.plugin_registered:
            self.registered.set()
        return reg.RegistrationStatusResponse()

    async def NodePrepareResources(  # noqa: N802
        self, request: dra.NodePrepareResourcesRequest, context: object
    ) -> dra.NodePrepareResourcesResponse:
        """Prepare every claim with our single device and its CDI ID."""
        response = dra.NodePrepareResourcesResponse()
        for claim in request.claims:
            self.prepared.append(claim.uid)
            response.claims[claim.uid].devices.append(
                dra.Device(
                    request_names=["dev"],
                    pool_name=self.node,
                    device_name=self.device,
                    cdi_device_ids=[cdi_id(self.device)],
                )
            )
        return response

    async def NodeUnprepareResources(  # noqa: N802
        self, request: dra.NodeUnprepareResourcesRequest, context: object
    ) -> dra.NodeUnprepareResourcesResponse:
        """Record the unprepare; nothing to undo."""
        response = dra.NodeUnprepareResourcesResponse()
        for claim in request.claims:
            self.unprepared.append(claim.uid)
            response.claims[claim.uid].error = ""
        return response
