"""Test stand-in DRA plugins on the plugin's own grpclib plumbing: serving, and their registration side.

A stand-in plugin implements the registration and the DRA service in one class (``StandInPlugin``);
each socket must serve only its own service, so each gets the mapping of one generated base class.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from grpclib.const import Handler
from grpclib.server import Stream

from imexdra.dra._pb import dra_v1_grpc as dra_grpc
from imexdra.dra._pb import pluginregistration_v1_grpc as reg_grpc
from imexdra.dra._pb import pluginregistration_v1_pb2 as reg
from imexdra.dra.grpcserver import GrpcServer, unary_request


class _Mapping:
    def __init__(self, mapping: dict[str, Handler]) -> None:
        self._mapping = mapping

    def __mapping__(self) -> dict[str, Handler]:
        return self._mapping


async def serve_unix(servicer: Any, base: type, socket: Path) -> GrpcServer:
    """Serve ``base``'s methods of ``servicer`` on the unix socket ``socket``."""
    server = GrpcServer([_Mapping(base.__mapping__(servicer))])
    await server.start_unix(socket)
    return server


async def stop_unix(server: GrpcServer, socket: Path) -> None:
    """Stop ``server`` and remove its socket file (which deregisters a plugin)."""
    await server.stop()
    with contextlib.suppress(FileNotFoundError):
        socket.unlink()


@dataclass
class StandInPlugin(reg_grpc.RegistrationBase, dra_grpc.DRAPluginBase):
    """A stand-in DRA plugin's registration side: its two sockets on one node's kubelet, ``GetInfo``
    and ``NotifyRegistrationStatus``. A subclass names its driver and answers the DRA calls."""

    #: The driver name it registers as; a subclass sets it.
    driver: ClassVar[str]

    node: str
    registry_dir: Path
    plugins_dir: Path
    registered: asyncio.Event = field(default_factory=asyncio.Event)
    registrations: list[reg.RegistrationStatus] = field(default_factory=list)

    @property
    def dra_socket(self) -> Path:
        """Path of the DRA node-service socket."""
        return self.plugins_dir / self.driver / "dra.sock"

    @property
    def registration_socket(self) -> Path:
        """Path of the registration socket the kubelet watches for."""
        return self.registry_dir / f"{self.driver}-reg.sock"

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
                name=self.driver,
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
