"""The DRA resource-health stream (``v1alpha1.DRAResourceHealth/NodeWatchResources``, docs/device-health.md).

A 1.36 kubelet (gate ``ResourceHealthStatus``, beta, on by default) opens this server stream on every
DRA plugin it registers and retries every 5 s while the plugin answers UNIMPLEMENTED, as upstream's
plugin does. We serve it: the kubelet then keeps one stream open instead of calling twelve times a
minute, and shows each prepared device's health in the pod's ``status.containerStatuses[]
.allocatedResourcesStatus``.

Each message is the complete list of the node's published devices (the kubelet marks a device left
out ``Unknown``), each with the health ``check`` found, sent when the stream opens and then every
``interval`` seconds. The kubelet counts a device's health as current for ``health_check_timeout_seconds``
from when it received it (its own clock); we set that to ``TIMEOUT_INTERVALS`` intervals, so one late
or lost message does not turn a healthy device ``Unknown``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import structlog
from grpclib.server import Stream

from imexdra.dra._pb import dra_health_v1alpha1_grpc as health_grpc
from imexdra.dra._pb import dra_health_v1alpha1_pb2 as health_pb
from imexdra.dra.grpcserver import unary_request

_log = structlog.get_logger(__name__)

#: The service name ``GetInfo`` lists once the stream is served (as the Go kubeletplugin library does).
HEALTH_SERVICE = "v1alpha1.DRAResourceHealth"
#: Seconds between two messages of one stream.
DEFAULT_INTERVAL = 30.0
#: A device's reported health stays current for this many intervals.
TIMEOUT_INTERVALS = 3


@dataclass(frozen=True, slots=True)
class DeviceHealth:
    """One device's health as a check found it: healthy, or not and why."""

    device: str
    healthy: bool
    message: str = ""


class ResourceHealthServicer(health_grpc.DRAResourceHealthBase):
    """Streams ``check()``'s verdicts on the devices of pool ``pool`` to each kubelet that asks."""

    def __init__(
        self,
        *,
        pool: str,
        check: Callable[[], Sequence[DeviceHealth]],
        interval: float = DEFAULT_INTERVAL,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._pool = pool
        self._check = check
        self.interval = interval
        self._clock = clock
        self._last: tuple[DeviceHealth, ...] = ()

    def response(self) -> health_pb.NodeWatchResourcesResponse:
        """The complete list, as the check finds it now; each change of a device's verdict is logged."""
        verdicts = tuple(self._check())
        before = {v.device: v for v in self._last}
        for verdict in verdicts:
            if verdict == before.get(verdict.device):
                continue
            if not verdict.healthy:
                _log.warning(
                    "Device unhealthy", pool=self._pool, device=verdict.device, reason=verdict.message
                )
            elif verdict.device in before:
                _log.info("Device healthy again", pool=self._pool, device=verdict.device)
        self._last = verdicts
        now = int(self._clock())
        timeout = int(self.interval * TIMEOUT_INTERVALS)
        return health_pb.NodeWatchResourcesResponse(
            devices=[
                health_pb.DeviceHealth(
                    device=health_pb.DeviceIdentifier(pool_name=self._pool, device_name=v.device),
                    health=health_pb.HEALTHY if v.healthy else health_pb.UNHEALTHY,
                    last_updated_time=now,
                    health_check_timeout_seconds=timeout,
                    message=v.message[:1024],
                )
                for v in verdicts
            ]
        )

    async def NodeWatchResources(  # noqa: N802 - gRPC method name
        self, stream: Stream[health_pb.NodeWatchResourcesRequest, health_pb.NodeWatchResourcesResponse]
    ) -> None:
        """Send the list now and every interval until the kubelet goes away (the server cancels us)."""
        await unary_request(stream)
        _log.debug("NodeWatchResources stream opened", pool=self._pool)
        while True:
            await stream.send_message(self.response())
            await asyncio.sleep(self.interval)
