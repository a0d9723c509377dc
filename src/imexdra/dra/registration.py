"""The kubelet plugin-registration service (``pluginregistration.Registration``, docs/compatibility.md §2.7).

The kubelet's plugin watcher sees our socket appear in the registrar directory, calls ``GetInfo``
and then ``NotifyRegistrationStatus``. ``GetInfo`` answers as the Go kubeletplugin library does:
type ``DRAPlugin``, the driver name, the absolute DRA socket path, and the *service names* we serve
(``v1.DRAPlugin`` first, so the kubelet picks v1). A failed registration is answered with an error
(``failed registration process: ...``) and remembered, so the plugin can report it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import structlog
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from grpclib.server import Stream

from imexdra.dra._pb import pluginregistration_v1_grpc as reg_grpc
from imexdra.dra._pb import pluginregistration_v1_pb2 as reg
from imexdra.dra.grpcserver import unary_request

_log = structlog.get_logger(__name__)

DRA_PLUGIN_TYPE = "DRAPlugin"


@dataclass(frozen=True, slots=True)
class RegistrationStatus:
    """What the kubelet last told us about our registration."""

    registered: bool
    error: str


class RegistrationServicer(reg_grpc.RegistrationBase):
    """Answers the kubelet's plugin watcher."""

    def __init__(self, *, driver_name: str, endpoint: str, supported_versions: Sequence[str]) -> None:
        self._info = reg.PluginInfo(
            type=DRA_PLUGIN_TYPE,
            name=driver_name,
            endpoint=endpoint,
            supported_versions=list(supported_versions),
        )
        self.status: RegistrationStatus | None = None
        self.registered = asyncio.Event()

    async def GetInfo(self, stream: Stream[reg.InfoRequest, reg.PluginInfo]) -> None:  # noqa: N802 - gRPC name
        """Describe the plugin to the kubelet."""
        await unary_request(stream)
        _log.debug("GetInfo", endpoint=self._info.endpoint)
        await stream.send_message(self._info)

    async def NotifyRegistrationStatus(  # noqa: N802 - gRPC method name
        self, stream: Stream[reg.RegistrationStatus, reg.RegistrationStatusResponse]
    ) -> None:
        """Record the kubelet's verdict; a refusal is answered with an error, as upstream does."""
        request = await unary_request(stream)
        self.status = RegistrationStatus(registered=request.plugin_registered, error=request.error)
        if not request.plugin_registered:
            self.registered.clear()
            _log.error("Kubelet refused plugin registration", error=request.error)
            raise GRPCError(Status.UNKNOWN, f"failed registration process: {request.error}")
        self.registered.set()
        _log.info("Registered with the kubelet", driver=self._info.name, endpoint=self._info.endpoint)
        await stream.send_message(reg.RegistrationStatusResponse())
