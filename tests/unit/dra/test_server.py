"""The kubelet-facing gRPC servers over real unix sockets, called by a real grpc.aio client.

The servers are grpclib's, the client grpcio's: two implementations (tests/support/grpcio_client.py).

Covers registration (GetInfo, NotifyRegistrationStatus), v1 and v1beta1 prepare/unprepare round trips
with per-claim errors and left-out claims, whole-call errors, the empty health-check call, concurrency
(no library-level serialisation) and the socket lifecycle. The driver behind the servers is a
scripted stand-in, since the servers' contract is exactly "call the driver, translate its answer".
"""

import asyncio
import os
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from imexdra.common.errors import ConfigError, PermanentError
from imexdra.dra import server as server_module
from imexdra.dra._pb import dra_v1_pb2 as v1
from imexdra.dra._pb import dra_v1beta1_pb2 as v1beta1
from imexdra.dra._pb import pluginregistration_v1_pb2 as reg
from imexdra.dra.claimstatus import canonical_claim_status
from imexdra.dra.driver import Device
from imexdra.dra.paths import SocketPaths
from imexdra.dra.resourceclaim import ClaimRef
from imexdra.dra.server import KubeletPluginServer
from tests.support.grpcio_client import dra_v1_stub, dra_v1beta1_stub, registration_stub
from tests.support.waiting import eventually
from tests.unit.dra.server_fakes import ALLOCATED, DRIVER_NAME, ApiClaims, ScriptedDriver

CHANNEL_DEVICE = Device(
    ("channel/sub",), "node-a", "channel-0", ("k8s.compute-domain.nvidia.com/claim=u1-channel-0",)
)
DAEMON_DEVICE = Device(
    ("daemon",),
    "node-a",
    "daemon-0",
    ("k8s.compute-domain.nvidia.com/device=all", "k8s.compute-domain.nvidia.com/claim=u3-daemon-0"),
    share_id="share-1",
)


@pytest.fixture
def driver() -> ScriptedDriver:
    return ScriptedDriver()


@pytest.fixture
def claims() -> ApiClaims:
    return ApiClaims()


@pytest.fixture
async def plugin(
    paths: SocketPaths, driver: ScriptedDriver, claims: ApiClaims
) -> AsyncIterator[KubeletPluginServer]:
    async with KubeletPluginServer(driver=driver, get_claim=claims, paths=paths) as running:
        yield running


@pytest.fixture
async def dra_channel(plugin: KubeletPluginServer) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(f"unix://{plugin.paths.dra_socket}") as channel:
        yield channel


def claim(uid: str, name: str | None = None) -> dict[str, str]:
    return {"namespace": "default", "name": name or f"claim-{uid}", "uid": uid}


async def test_get_info(plugin: KubeletPluginServer) -> None:
    """GetInfo names a DRAPlugin with the DRA socket as endpoint and both service versions, v1 first."""
    async with grpc.aio.insecure_channel(f"unix://{plugin.paths.registration_socket}") as channel:
        info = await registration_stub(channel).GetInfo(reg.InfoRequest())
    assert info.type == "DRAPlugin"
    assert info.name == "compute-domain.nvidia.com"
    assert info.endpoint == str(plugin.paths.dra_socket)
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]


async def test_notify_registration_status(plugin: KubeletPluginServer) -> None:
    """A successful registration is recorded; a refusal is recorded and answered with an error."""
    assert plugin.registration is not None
    async with grpc.aio.insecure_channel(f"unix://{plugin.paths.registration_socket}") as channel:
        stub = registration_stub(channel)
        await stub.NotifyRegistrationStatus(reg.RegistrationStatus(plugin_registered=True))
        assert plugin.registration.registered.is_set()
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.NotifyRegistrationStatus(
                reg.RegistrationStatus(plugin_registered=False, error="version skew")
            )
    assert caught.value.code() == grpc.StatusCode.UNKNOWN
    assert caught.value.details() == "failed registration process: version skew"
    assert plugin.registration.status is not None and plugin.registration.status.error == "version skew"
    assert not plugin.registration.registered.is_set()


async def test_v1_prepare_round_trip(
    dra_channel: grpc.aio.Channel, driver: ScriptedDriver, claims: ApiClaims
) -> None:
    """Successes carry devices (subrequest cut, share_id kept); errors are per claim; left-out is absent."""
    for uid in ("u1", "u2", "u3", "u4"):
        claims.add("default", f"claim-{uid}", uid)
    driver.prepare_script = {
        "u1": (CHANNEL_DEVICE,),
        "u2": PermanentError("domainID cannot be empty"),
        "u3": (DAEMON_DEVICE,),
    }
    response = await dra_v1_stub(dra_channel).NodePrepareResources(
        v1.NodePrepareResourcesRequest(claims=[claim(u) for u in ("u1", "u2", "u3", "u4")])
    )
    assert sorted(response.claims) == ["u1", "u2", "u3"]
    (channel_dev,) = response.claims["u1"].devices
    assert (list(channel_dev.request_names), channel_dev.pool_name, channel_dev.device_name) == (
        ["channel"],
        "node-a",
        "channel-0",
    )
    assert list(channel_dev.cdi_device_ids) == list(CHANNEL_DEVICE.cdi_device_ids)
    assert not channel_dev.HasField("share_id")
    assert response.claims["u1"].error == ""
    assert response.claims["u2"].error == "domainID cannot be empty" and not response.claims["u2"].devices
    (daemon_dev,) = response.claims["u3"].devices
    assert daemon_dev.HasField("share_id") and daemon_dev.share_id == "share-1"
    assert [c.ref for c in driver.prepared] == [
        ClaimRef("default", f"claim-{u}", u) for u in ("u1", "u2", "u3", "u4")
    ]
    assert driver.prepared[0].status_json == canonical_claim_status(ALLOCATED)


@pytest.mark.parametrize(
    ("bad_status", "detail"),
    [
        (["allocation"], "status: expected an object, got list"),
        ({"allocation": {"devices": {"results": [{"request": 5}]}}}, "expected a string, got int"),
    ],
    ids=["status-is-a-list", "request-is-a-number"],
)
async def test_malformed_claim_fails_alone_and_permanently(
    dra_channel: grpc.aio.Channel, driver: ScriptedDriver, claims: ApiClaims, bad_status: object, detail: str
) -> None:
    """A claim that does not decode gets its own permanent error; the call's other claims are prepared."""
    claims.add("default", "claim-u1", "u1")
    claims.add("default", "claim-u2", "u2", status=bad_status)
    driver.prepare_script = {"u1": (CHANNEL_DEVICE,)}
    response = await dra_v1_stub(dra_channel).NodePrepareResources(
        v1.NodePrepareResourcesRequest(claims=[claim("u1"), claim("u2")])
    )
    assert response.claims["u1"].error == "" and len(response.claims["u1"].devices) == 1
    error = response.claims["u2"].error
    assert error.startswith("retrieve claim default/claim-u2: malformed ResourceClaim status: ")
    assert detail in error and not response.claims["u2"].devices
    assert [c.ref.uid for c in driver.prepared] == ["u1"]


async def test_v1beta1_prepare_round_trip(
    dra_channel: grpc.aio.Channel, driver: ScriptedDriver, claims: ApiClaims
) -> None:
    """v1beta1 gets the same answers through the v1 implementation, without share_id."""
    claims.add("default", "claim-u3", "u3")
    claims.add("default", "claim-u2", "u2")
    driver.prepare_script = {"u3": (DAEMON_DEVICE,), "u2": PermanentError("nope")}
    response = await dra_v1beta1_stub(dra_channel).NodePrepareResources(
        v1beta1.NodePrepareResourcesRequest(claims=[claim("u3"), claim("u2")])
    )
    (device,) = response.claims["u3"].devices
    assert list(device.cdi_device_ids) == list(DAEMON_DEVICE.cdi_device_ids)
    assert response.claims["u2"].error == "nope"
    # Nothing of share_id (field 5 in v1) reaches the v1beta1 wire, not even as an unknown field.
    assert not v1.Device.FromString(device.SerializeToString()).HasField("share_id")


@pytest.mark.parametrize("version", ["v1", "v1beta1"])
async def test_unprepare_round_trip(
    dra_channel: grpc.aio.Channel, driver: ScriptedDriver, claims: ApiClaims, version: str
) -> None:
    """Unprepare reports per-claim errors and successes and never reads claims from the API."""
    driver.unprepare_script = {
        "u2": RuntimeError("error unpreparing devices for claim 'default/claim-u2:u2': busy")
    }
    module, stub_type = (v1, dra_v1_stub) if version == "v1" else (v1beta1, dra_v1beta1_stub)
    response = await stub_type(dra_channel).NodeUnprepareResources(
        module.NodeUnprepareResourcesRequest(claims=[claim("u1"), claim("u2")])
    )
    assert {uid: entry.error for uid, entry in response.claims.items()} == {
        "u1": "",
        "u2": "error unpreparing devices for claim 'default/claim-u2:u2': busy",
    }
    assert driver.unprepared == [ClaimRef("default", "claim-u1", "u1"), ClaimRef("default", "claim-u2", "u2")]
    assert claims.calls == 0


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (
            lambda c, d: None,
            'get resource claims: retrieve claim default/claim-u1: resourceclaims "claim-u1" not found',
        ),
        (
            lambda c, d: c.add("default", "claim-u1", "other-uid"),
            "get resource claims: claim default/claim-u1 got replaced",
        ),
        (
            lambda c, d: c.add("default", "claim-u1", "u1", status={}),
            "get resource claims: claim default/claim-u1 not allocated",
        ),
        (
            lambda c, d: (
                c.add("default", "claim-u1", "u1"),
                setattr(d, "raise_on_call", RuntimeError("boom")),
            ),
            "prepare resource claims: boom",
        ),
    ],
    ids=["claim-missing", "claim-replaced", "not-allocated", "driver-failed"],
)
async def test_prepare_whole_call_errors(
    dra_channel: grpc.aio.Channel, driver: ScriptedDriver, claims: ApiClaims, setup: Any, message: str
) -> None:
    """Unreadable, replaced or unallocated claims and driver failures fail the call with status UNKNOWN."""
    setup(claims, driver)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await dra_v1_stub(dra_channel).NodePrepareResources(
            v1.NodePrepareResourcesRequest(claims=[claim("u1")])
        )
    assert caught.value.code() == grpc.StatusCode.UNKNOWN
    assert caught.value.details() == message
    assert driver.prepared == []


async def test_unprepare_driver_failure(dra_channel: grpc.aio.Channel, driver: ScriptedDriver) -> None:
    """A driver failure of a whole unprepare call is status UNKNOWN with the reason."""
    driver.raise_on_call = RuntimeError("disk gone")
    with pytest.raises(grpc.aio.AioRpcError, match="unprepare resource claims: disk gone"):
        await dra_v1_stub(dra_channel).NodeUnprepareResources(
            v1.NodeUnprepareResourcesRequest(claims=[claim("u1")])
        )


async def test_empty_prepare_is_immediate(
    dra_channel: grpc.aio.Channel, driver: ScriptedDriver, claims: ApiClaims
) -> None:
    """The health check's empty v1beta1 prepare succeeds without touching the API or the driver."""
    driver.raise_on_call = RuntimeError("must not be called")
    response = await dra_v1beta1_stub(dra_channel).NodePrepareResources(v1beta1.NodePrepareResourcesRequest())
    assert len(response.claims) == 0
    assert claims.calls == 0


async def test_calls_are_not_serialised(
    dra_channel: grpc.aio.Channel, driver: ScriptedDriver, claims: ApiClaims
) -> None:
    """A blocked prepare does not hold up another call (the channel/daemon co-dependency needs this)."""
    claims.add("default", "claim-ch", "ch")
    claims.add("default", "claim-dm", "dm")
    driver.gates["ch"] = asyncio.Event()
    driver.prepare_script = {"ch": (CHANNEL_DEVICE,), "dm": (DAEMON_DEVICE,)}
    stub = dra_v1_stub(dra_channel)
    blocked = asyncio.ensure_future(
        stub.NodePrepareResources(v1.NodePrepareResourcesRequest(claims=[claim("ch")]))
    )
    other = await asyncio.wait_for(
        stub.NodePrepareResources(v1.NodePrepareResourcesRequest(claims=[claim("dm")])), timeout=10
    )
    assert list(other.claims) == ["dm"]
    assert not blocked.done()
    driver.gates["ch"].set()
    assert list((await asyncio.wait_for(blocked, timeout=10)).claims) == ["ch"]


async def test_socket_lifecycle(
    paths: SocketPaths, driver: ScriptedDriver, claims: ApiClaims, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stale sockets are replaced, DRA binds before registration, and both sockets are removed on stop."""
    paths.plugin_data_dir.mkdir(parents=True)
    paths.dra_socket.write_text("stale")
    paths.registration_socket.write_text("stale")
    order: list[Path] = []
    real_serve = server_module._serve

    async def recording_serve(grpc_server: Any, socket: Path) -> None:
        order.append(socket)
        await real_serve(grpc_server, socket)

    monkeypatch.setattr(server_module, "_serve", recording_serve)
    plugin = KubeletPluginServer(driver=driver, get_claim=claims, paths=paths)
    await plugin.start()
    try:
        assert order == [paths.dra_socket, paths.registration_socket]
        assert paths.dra_socket.is_socket() and paths.registration_socket.is_socket()
    finally:
        await plugin.stop()
    assert not paths.dra_socket.exists()
    assert not paths.registration_socket.exists()
    await plugin.stop()  # idempotent


async def test_sockets_admit_only_their_owner_whatever_the_umask(
    paths: SocketPaths, driver: ScriptedDriver, claims: ApiClaims
) -> None:
    """Connecting to a unix socket needs write permission: neither socket grants it to group or others."""
    old_umask = os.umask(0)
    try:
        async with KubeletPluginServer(driver=driver, get_claim=claims, paths=paths):
            modes = {
                s.name: stat.S_IMODE(s.stat().st_mode) for s in (paths.dra_socket, paths.registration_socket)
            }
            data_dir_mode = stat.S_IMODE(paths.plugin_data_dir.stat().st_mode)
    finally:
        os.umask(old_umask)
    assert modes == {paths.dra_socket.name: 0o600, paths.registration_socket.name: 0o600}
    assert data_dir_mode == 0o750


async def test_failed_start_cleans_up(paths: SocketPaths, driver: ScriptedDriver, claims: ApiClaims) -> None:
    """If the registration socket cannot be bound, start fails and the DRA socket is gone again."""
    paths.registration_socket.mkdir()
    plugin = KubeletPluginServer(driver=driver, get_claim=claims, paths=paths)
    with pytest.raises(ConfigError, match="directory is in the way"):
        await plugin.start()
    assert not paths.dra_socket.exists()


@pytest.mark.parametrize("problem", ["no-registrar-dir", "path-too-long"])
async def test_start_config_errors(
    short_dir: Path, driver: ScriptedDriver, claims: ApiClaims, problem: str
) -> None:
    """A missing registrar directory or an over-long socket path is a clear ConfigError."""
    if problem == "no-registrar-dir":
        paths = SocketPaths(
            driver_name=DRIVER_NAME, plugins_dir=short_dir / "p", registrar_dir=short_dir / "missing"
        )
        message = "registrar directory"
    else:
        (short_dir / "r").mkdir()
        paths = SocketPaths(
            driver_name=DRIVER_NAME, plugins_dir=short_dir / ("x" * 100), registrar_dir=short_dir / "r"
        )
        message = "longer than 107 bytes"
    with pytest.raises(ConfigError, match=message):
        await KubeletPluginServer(driver=driver, get_claim=claims, paths=paths).start()


async def test_stop_closes_the_kubelets_open_connection(
    paths: SocketPaths, driver: ScriptedDriver, claims: ApiClaims
) -> None:
    """A client holding a connection cannot call a stopped plugin: stop closes it, not just the listener."""
    plugin = KubeletPluginServer(driver=driver, get_claim=claims, paths=paths)
    await plugin.start()
    async with grpc.aio.insecure_channel(f"unix://{paths.registration_socket}") as channel:
        stub = registration_stub(channel)
        await stub.GetInfo(reg.InfoRequest(), timeout=10)
        await plugin.stop()
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.GetInfo(reg.InfoRequest(), timeout=10)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_closed_connections_are_not_kept(
    paths: SocketPaths, driver: ScriptedDriver, claims: ApiClaims
) -> None:
    """The health check connects twice per probe: a long-running plugin must not keep every connection."""

    async def connect_once() -> int:
        async with grpc.aio.insecure_channel(f"unix://{paths.registration_socket}") as channel:
            await registration_stub(channel).GetInfo(reg.InfoRequest(), timeout=10)
        assert plugin._registration_server is not None
        return len(plugin._registration_server._server.connections)

    async def few_kept() -> bool:
        return await connect_once() <= 2

    async with KubeletPluginServer(driver=driver, get_claim=claims, paths=paths) as plugin:
        for _ in range(20):
            await connect_once()
        # Closed connections are dropped when the next one is accepted.
        await eventually("at most two connections kept", few_kept, within=10)
