"""The gRPC health endpoint (docs/compatibility.md §2.7): message encoding, Check against real sockets."""

import socket
from collections.abc import AsyncIterator, Mapping, Sequence

import grpc
import pytest

from imexdra.dra.driver import PrepareResult, UnprepareResult
from imexdra.dra.health import (
    NOT_SERVING,
    SERVING,
    HealthServer,
    decode_check_request,
    encode_check_response,
)
from imexdra.dra.paths import SocketPaths
from imexdra.dra.resourceclaim import ClaimRef, ResourceClaim
from imexdra.dra.server import KubeletPluginServer


class IdleDriver:
    """A driver that is never asked anything (the health check sends empty requests)."""

    async def prepare(self, claims: Sequence[ResourceClaim]) -> Mapping[str, PrepareResult]:
        raise AssertionError("the health check must not reach the driver")

    async def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, UnprepareResult]:
        raise AssertionError("the health check must not reach the driver")


async def no_claims(namespace: str, name: str) -> ResourceClaim:
    raise AssertionError("no claim is fetched")


@pytest.mark.parametrize(
    ("data", "service"),
    [
        (b"", ""),
        (b"\x0a\x08liveness", "liveness"),
        (b"\x10\x01\x0a\x03abc", "abc"),  # an unknown varint field first
        (b"\x1d\x00\x00\x00\x00\x0a\x01x", "x"),  # an unknown fixed32 field first
    ],
    ids=["empty", "liveness", "skip-varint", "skip-fixed32"],
)
def test_decode_check_request(data: bytes, service: str) -> None:
    """The service name is read from field 1; other fields are skipped."""
    assert decode_check_request(data) == service


def test_encode_check_response() -> None:
    """Status is field 1 as a varint; UNKNOWN (0) is the empty message."""
    assert encode_check_response(SERVING) == b"\x08\x01"
    assert encode_check_response(NOT_SERVING) == b"\x08\x02"
    assert encode_check_response(0) == b""


@pytest.fixture
async def served(paths: SocketPaths) -> AsyncIterator[tuple[KubeletPluginServer, HealthServer]]:
    server = KubeletPluginServer(driver=IdleDriver(), get_claim=no_claims, paths=paths)
    await server.start()
    health = HealthServer(paths, 0)
    await health.start()
    yield server, health
    await health.stop()
    await server.stop()


async def check(port: int, service: str, host: str = "127.0.0.1") -> bytes:
    async with grpc.aio.insecure_channel(f"{host}:{port}") as channel:
        call = channel.unary_unary(
            "/grpc.health.v1.Health/Check",
            request_serializer=lambda s: b"\x0a" + bytes([len(s)]) + s.encode() if s else b"",
            response_deserializer=lambda data: data,
        )
        response: bytes = await call(service, timeout=10)
        return response


@pytest.mark.parametrize("service", ["", "liveness"])
async def test_serving_while_both_sockets_answer(
    served: tuple[KubeletPluginServer, HealthServer], service: str
) -> None:
    """GetInfo and an empty v1beta1 prepare both answer: SERVING."""
    _, health = served
    assert await check(health.port, service) == encode_check_response(SERVING)


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not ipv6_loopback(), reason="this host has no IPv6 loopback")
async def test_every_interface_is_one_port_for_ipv4_and_ipv6(
    served: tuple[KubeletPluginServer, HealthServer],
) -> None:
    """Without a pod IP the port answers on IPv4 and IPv6 alike (one dual-stack socket, as grpcio bound)."""
    _, health = served
    assert await check(health.port, "", "127.0.0.1") == encode_check_response(SERVING)
    assert await check(health.port, "", "[::1]") == encode_check_response(SERVING)


async def test_not_serving_once_the_plugin_sockets_are_gone(
    served: tuple[KubeletPluginServer, HealthServer],
) -> None:
    """With the kubelet-facing servers stopped the answer is NOT_SERVING, not an RPC error."""
    server, health = served
    await server.stop()
    assert await check(health.port, "liveness") == encode_check_response(NOT_SERVING)


async def test_unknown_service_is_not_found(served: tuple[KubeletPluginServer, HealthServer]) -> None:
    """Only "" and "liveness" are known services."""
    _, health = served
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await check(health.port, "readiness")
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    assert caught.value.details() == "unknown service"


async def test_binds_the_pod_ip_so_host_network_pods_share_a_port(paths: SocketPaths) -> None:
    """Two plugins on one host network, each on its own pod IP, both serve the same port."""
    first = HealthServer(paths, 0, "127.0.0.2")
    await first.start()
    second = HealthServer(paths, first.port, "127.0.0.3")
    try:
        await second.start()
        assert second.port == first.port
        with pytest.raises(grpc.aio.AioRpcError):
            async with grpc.aio.insecure_channel(f"127.0.0.4:{first.port}") as channel:
                await channel.unary_unary("/grpc.health.v1.Health/Check")(b"", timeout=2)
    finally:
        await second.stop()
        await first.stop()
