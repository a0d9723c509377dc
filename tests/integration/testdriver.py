"""A minimal test-only DRA driver: real plugin registration and DRA v1 gRPC on a node's kubelet sockets.

It exists to prove the cluster's DRA path end to end independently of imexdra's own plugin: the
kubelet discovers it, the scheduler allocates its device, the kubelet calls NodePrepareResources and
passes the returned CDI ID to the runtime, and NodeUnprepareResources follows pod deletion.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from grpclib.server import Stream

from imexdra.dra._pb import dra_v1_grpc as dra_grpc
from imexdra.dra._pb import dra_v1_pb2 as dra
from imexdra.dra._pb import pluginregistration_v1_grpc as reg_grpc
from imexdra.dra._pb import pluginregistration_v1_pb2 as reg
from imexdra.dra.grpcserver import unary_request
from tests.support.grpcserving import serve_unix, stop_unix

DRIVER = "test.imexdra.dev"


def cdi_id(device: str) -> str:
    """The CDI device ID this driver hands out for ``device``."""
    return f"{DRIVER}/test={device}"


@dataclass
class TestDriver(reg_grpc.RegistrationBase, dra_grpc.DRAPluginBase):
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
        self._dra_server = await serve_unix(self, dra_grpc.DRAPluginBase, self.dra_socket)
        self._reg_server = await serve_unix(self, reg_grpc.RegistrationBase, self.registration_socket)

    async def stop(self) -> None:
        """Stop both servers and remove the socket files, which deregisters the plugin."""
        await stop_unix(self._reg_server, self.registration_socket)
        await stop_unix(self._dra_server, self.dra_socket)

    async def GetInfo(self, stream: Stream[reg.InfoRequest, reg.PluginInfo]) -> None:  # noqa: N802
        """Answer the kubelet's discovery call."""
        await unary_request(stream)
        await stream.send_message(
            reg.PluginInfo(
                type="DRAPlugin",
                name=DRIVER,
                endpoint=str(self.dra_socket),
                supported_versions=["v1.DRAPlugin"],
            )
        )

    async def NotifyRegistrationStatus(  # noqa: N802
        self, stream: Stream[reg.RegistrationStatus, reg.RegistrationStatusResponse]
    ) -> None:
        """Record the kubelet's verdict on our registration."""
        request = await unary_request(stream)
        self.registrations.append(request)
        if request.plugin_registered:
            self.registered.set()
        await stream.send_message(reg.RegistrationStatusResponse())

    async def NodePrepareResources(  # noqa: N802
        self, stream: Stream[dra.NodePrepareResourcesRequest, dra.NodePrepareResourcesResponse]
    ) -> None:
        """Prepare every claim with our single device and its CDI ID."""
        request = await unary_request(stream)
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
        await stream.send_message(response)

    async def NodeUnprepareResources(  # noqa: N802
        self, stream: Stream[dra.NodeUnprepareResourcesRequest, dra.NodeUnprepareResourcesResponse]
    ) -> None:
        """Record the unprepare; nothing to undo."""
        request = await unary_request(stream)
        response = dra.NodeUnprepareResourcesResponse()
        for claim in request.claims:
            self.unprepared.append(claim.uid)
            response.claims[claim.uid].error = ""
        await stream.send_message(response)
