"""The resource-health stream the kubelet opens on the DRA socket, called by a real grpc.aio client.

The servicer (``dra.resourcehealth``) behind the real ``KubeletPluginServer`` on a unix socket; the
check is a stand-in whose verdict the test changes, since the stream's contract is "send every
device's verdict, complete, now and every interval" (the real check: tests/unit/devices).
"""

from __future__ import annotations

import grpc

from imexdra.dra._pb import dra_health_v1alpha1_pb2 as health_pb
from imexdra.dra._pb import pluginregistration_v1_pb2 as reg
from imexdra.dra.paths import SocketPaths
from imexdra.dra.resourcehealth import HEALTH_SERVICE, TIMEOUT_INTERVALS, DeviceHealth, ResourceHealthServicer
from imexdra.dra.server import KubeletPluginServer
from tests.support.grpcio_client import registration_stub, resource_health_watch
from tests.unit.dra.server_fakes import ApiClaims, ScriptedDriver

NAMES = ("channel-0", "daemon-0")


def as_tuples(response: health_pb.NodeWatchResourcesResponse) -> list[tuple[str, str, int, str]]:
    return [(d.device.pool_name, d.device.device_name, d.health, d.message) for d in response.devices]


async def test_stream_sends_every_device_now_and_each_interval(paths: SocketPaths) -> None:
    """The first message comes at once, complete; a later one carries the check's new verdict."""
    lost: list[str] = []

    def check() -> list[DeviceHealth]:
        return [DeviceHealth(n, healthy=not lost, message=lost[0] if lost else "") for n in NAMES]

    health = ResourceHealthServicer(pool="node-a", check=check, interval=0.05, clock=lambda: 1_700_000_000.0)
    server = KubeletPluginServer(driver=ScriptedDriver(), get_claim=ApiClaims(), paths=paths, health=health)
    async with server, grpc.aio.insecure_channel(f"unix://{paths.dra_socket}") as channel:
        call = resource_health_watch(channel)(health_pb.NodeWatchResourcesRequest())
        first = await call.read()
        assert as_tuples(first) == [("node-a", n, health_pb.HEALTHY, "") for n in NAMES]
        assert {d.last_updated_time for d in first.devices} == {1_700_000_000}
        assert {d.health_check_timeout_seconds for d in first.devices} == {int(0.05 * TIMEOUT_INTERVALS)}
        lost.append("nvidia-caps-imex-channels is gone")
        while (message := await call.read()).devices[0].health == health_pb.HEALTHY:
            pass  # a message already on its way before the verdict changed
        assert as_tuples(message) == [
            ("node-a", n, health_pb.UNHEALTHY, "nvidia-caps-imex-channels is gone") for n in NAMES
        ]
        call.cancel()


async def test_get_info_lists_the_health_service_only_when_served(paths: SocketPaths) -> None:
    """With a health servicer ``GetInfo`` appends its service name; without one it is upstream's list."""
    health = ResourceHealthServicer(pool="node-a", check=list)
    for servicer, expected in ((None, ["v1.DRAPlugin", "v1beta1.DRAPlugin"]), (health, [HEALTH_SERVICE])):
        server = KubeletPluginServer(
            driver=ScriptedDriver(), get_claim=ApiClaims(), paths=paths, health=servicer
        )
        async with server, grpc.aio.insecure_channel(f"unix://{paths.registration_socket}") as channel:
            info = await registration_stub(channel).GetInfo(reg.InfoRequest())
        versions = list(info.supported_versions)
        assert versions[-len(expected) :] == expected and versions.count(HEALTH_SERVICE) == (
            servicer is not None
        )
