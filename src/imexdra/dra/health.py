"""The plugin's gRPC health endpoint (``grpc.health.v1.Health/Check``, docs/compatibility.md §2.7).

Enabled by ``--healthcheck-port >= 0`` (0 picks a free port); Helm's startup and liveness probes call
it with service ``liveness``. A check does what the kubelet does: ``GetInfo`` on the registration
socket, then an empty ``NodePrepareResources`` on the DRA socket over **v1beta1**. Both answering
means ``SERVING``, anything else ``NOT_SERVING``; a service other than ``""``/``liveness`` is gRPC
``NOT_FOUND``. ``Watch`` is not implemented, as upstream.

The two health messages are encoded by hand (one field each) rather than generating stubs for them:
the health server's codec (``_HealthCodec``) turns the request into its ``service`` string and a
status number into the response.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import structlog
from grpclib.client import Channel
from grpclib.const import Cardinality, Handler, Status
from grpclib.encoding.base import CodecBase
from grpclib.exceptions import GRPCError, StreamTerminatedError
from grpclib.server import Stream

from imexdra.dra._pb import dra_v1beta1_grpc as v1beta1_grpc
from imexdra.dra._pb import dra_v1beta1_pb2 as v1beta1
from imexdra.dra._pb import pluginregistration_v1_grpc as reg_grpc
from imexdra.dra._pb import pluginregistration_v1_pb2 as reg
from imexdra.dra.grpcserver import GrpcServer, unary_request
from imexdra.dra.paths import SocketPaths

_log = structlog.get_logger(__name__)

SERVICE = "grpc.health.v1.Health"
KNOWN_SERVICES = frozenset({"", "liveness"})
CHECK_TIMEOUT = 5.0

# grpc.health.v1.HealthCheckResponse.ServingStatus
SERVING = 1
NOT_SERVING = 2


def decode_check_request(data: bytes) -> str:
    """The ``service`` (field 1, string) of a serialized ``HealthCheckRequest``."""
    service = ""
    position = 0
    while position < len(data):
        key, position = _varint(data, position)
        field, wire_type = key >> 3, key & 7
        if wire_type == 0:
            _, position = _varint(data, position)
        elif wire_type == 2:
            length, position = _varint(data, position)
            if field == 1:
                service = data[position : position + length].decode("utf-8")
            position += length
        elif wire_type in (1, 5):
            position += 8 if wire_type == 1 else 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire_type}")
    return service


def encode_check_response(status: int) -> bytes:
    """A serialized ``HealthCheckResponse`` with ``status`` (field 1, enum)."""
    return bytes([0x08, status]) if status else b""


def _varint(data: bytes, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if position >= len(data):
            raise ValueError("truncated protobuf varint")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, position
        shift += 7


async def plugin_answers(paths: SocketPaths, *, rpc_timeout: float = CHECK_TIMEOUT) -> bool:
    """Whether the registration and DRA sockets answer as the kubelet needs them to."""
    try:
        async with Channel(path=str(paths.registration_socket)) as channel:
            info = await reg_grpc.RegistrationStub(channel).GetInfo(reg.InfoRequest(), timeout=rpc_timeout)
        async with Channel(path=str(Path(info.endpoint))) as channel:
            stub = v1beta1_grpc.DRAPluginStub(channel)
            await stub.NodePrepareResources(v1beta1.NodePrepareResourcesRequest(), timeout=rpc_timeout)
    except GRPCError as error:
        _log.warning("Health check failed", code=error.status.name, details=error.message)
        return False
    except (OSError, TimeoutError, StreamTerminatedError) as error:
        # No one listening, the socket gone, no answer in time: grpcio called these UNAVAILABLE.
        _log.warning("Health check failed", code="UNAVAILABLE", details=str(error) or type(error).__name__)
        return False
    return True


class _HealthCodec(CodecBase):
    """``application/grpc+proto`` for the two one-field health messages (see the module docstring)."""

    __content_subtype__ = "proto"

    def encode(self, message: Any, message_type: Any) -> bytes:
        return encode_check_response(int(message))

    def decode(self, data: bytes, message_type: Any) -> Any:
        return decode_check_request(data)


class HealthServer:
    """The health endpoint on ``host:port``; ``port`` holds the bound port once started.

    ``host`` is the pod's IP when known (the kubelet probes ``podIP:port``; pods on the host network
    would otherwise fight over one port), else every interface.
    """

    def __init__(self, paths: SocketPaths, port: int, host: str | None = None) -> None:
        self._paths = paths
        self.port = port
        self._host = host or None
        self._server: GrpcServer | None = None

    def __mapping__(self) -> dict[str, Handler]:
        """The service table grpclib serves: ``Check`` only."""
        return {f"/{SERVICE}/Check": Handler(self._check, Cardinality.UNARY_UNARY, str, int)}

    async def start(self) -> None:
        """Listen and serve."""
        server = GrpcServer([self], codec=_HealthCodec())
        self.port = await server.start_tcp(self._host, self.port)
        self._server = server
        _log.info("Health server listening", address=self._host or "[::]", port=self.port)

    async def stop(self) -> None:
        """Stop: a probe in flight is cancelled (the kubelet retries probes)."""
        if self._server is not None:
            await self._server.stop()
            self._server = None

    async def _check(self, stream: Stream[str, int]) -> None:
        service = await unary_request(stream)
        if service not in KNOWN_SERVICES:
            raise GRPCError(Status.NOT_FOUND, "unknown service")
        await stream.send_message(SERVING if await plugin_answers(self._paths) else NOT_SERVING)
