"""ResourceSlice devices (docs/data-path.md §4, §10), allocatable devices, device-name parsing, paths.

Cutting the list into slices is the DRA layer's (tests/unit/dra/test_slicepublisher.py).
"""

from pathlib import Path

import pytest

from imexdra.api.constants import DeviceType
from imexdra.api.imexmode import DRIVER_MANAGED_IMEX, HOST_MANAGED_IMEX, ImexManagement
from imexdra.kubeletplugin.paths import PluginPaths
from imexdra.kubeletplugin.slices import (
    AllocatableDevice,
    allocatable_devices,
    parse_device_name,
    published_devices,
    slice_devices,
)

CHANNEL_0 = {"name": "channel-0", "attributes": {"type": {"string": "channel"}, "id": {"int": 0}}}
DAEMON_0 = {"name": "daemon-0", "attributes": {"type": {"string": "daemon"}, "id": {"int": 0}}}


@pytest.mark.parametrize(
    ("imex", "expected"),
    [(DRIVER_MANAGED_IMEX, [CHANNEL_0, DAEMON_0]), (HOST_MANAGED_IMEX, [CHANNEL_0])],
    ids=["driver-managed", "host-managed-no-daemon"],
)
def test_slice_devices(imex: ImexManagement, expected: list[dict[str, object]]) -> None:
    """Driver-managed publishes channel-0 and daemon-0; host-managed only channel-0, each with type and id."""
    assert slice_devices(imex=imex) == expected


@pytest.mark.parametrize(
    ("imex", "names"),
    [(DRIVER_MANAGED_IMEX, ["channel-0", "daemon-0"]), (HOST_MANAGED_IMEX, ["channel-0"])],
    ids=["driver-managed", "host-managed"],
)
def test_published_subset_of_allocatable(imex: ImexManagement, names: list[str]) -> None:
    """Of {channel-0, channel-1, daemon-0} only channel 0 and (unless host-managed) the daemon go out."""
    allocatable = {
        d.name: d
        for d in (
            AllocatableDevice(DeviceType.DAEMON, 0),
            AllocatableDevice(DeviceType.CHANNEL, 1),
            AllocatableDevice(DeviceType.CHANNEL, 0),
        )
    }
    assert [d.name for d in published_devices(allocatable, imex=imex)] == names


def test_allocatable_devices() -> None:
    """The node can prepare channel-0..channel-2047 and daemon-0."""
    devices = allocatable_devices()
    assert len(devices) == 2049
    assert devices["channel-2047"] == AllocatableDevice(DeviceType.CHANNEL, 2047)
    assert devices["daemon-0"] == AllocatableDevice(DeviceType.DAEMON, 0)
    assert "channel-2048" not in devices


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("channel-0", AllocatableDevice(DeviceType.CHANNEL, 0)),
        ("channel-2047", AllocatableDevice(DeviceType.CHANNEL, 2047)),
        ("daemon-0", AllocatableDevice(DeviceType.DAEMON, 0)),
        ("channel-01", None),
        ("gpu-0", None),
        ("channel-", None),
        ("channel-0x", None),
    ],
    ids=["channel-0", "channel-2047", "daemon", "leading-zero", "other-kind", "no-id", "trailing"],
)
def test_parse_device_name(name: str, expected: AllocatableDevice | None) -> None:
    """Device names parse back to their type and ID; anything else is None."""
    assert parse_device_name(name) == expected


def test_channel_isolation_publishes_every_channel_but_zero() -> None:
    """Under channel isolation a node publishes channel-1..channel-2047, one device each, no channel-0."""
    devices = slice_devices(imex=HOST_MANAGED_IMEX, channel_isolation=True)
    assert len(devices) == 2047
    assert devices[0] == {
        "name": "channel-1",
        "attributes": {"type": {"string": "channel"}, "id": {"int": 1}},
    }
    assert devices[-1]["name"] == "channel-2047"
    assert [d["attributes"]["id"]["int"] for d in devices] == list(range(1, 2048))


def test_binding_conditions_mark_the_channel_devices_only() -> None:
    """Gate ComputeDomainBindingConditions: channel-0 waits for IMEXDaemonReady (fails on IMEXDaemonFailed),
    daemon-0 carries nothing (the daemon is what readiness waits for)."""
    channel, daemon = slice_devices(imex=DRIVER_MANAGED_IMEX, binding_conditions=True)
    assert channel == CHANNEL_0 | {
        "bindingConditions": ["IMEXDaemonReady"],
        "bindingFailureConditions": ["IMEXDaemonFailed"],
    }
    assert daemon == DAEMON_0


def test_binding_conditions_mark_every_isolated_channel() -> None:
    """Host-managed under channel isolation: each of channel-1..3 carries both conditions."""
    devices = slice_devices(
        imex=HOST_MANAGED_IMEX, channel_isolation=True, channel_count=4, binding_conditions=True
    )
    assert [d["bindingConditions"] for d in devices] == [["IMEXDaemonReady"]] * 3
    assert [d["bindingFailureConditions"] for d in devices] == [["IMEXDaemonFailed"]] * 3


def test_channel_isolation_follows_the_channel_count() -> None:
    """A smaller pool (--imex-channel-count 4) publishes channel-1..channel-3."""
    names = [
        d["name"] for d in slice_devices(imex=HOST_MANAGED_IMEX, channel_isolation=True, channel_count=4)
    ]
    assert names == ["channel-1", "channel-2", "channel-3"]


def test_plugin_paths_defaults() -> None:
    """Default socket and file locations match upstream's."""
    paths = PluginPaths()
    assert paths.dra_socket == Path("/var/lib/kubelet/plugins/compute-domain.nvidia.com/dra.sock")
    assert paths.registration_socket == Path(
        "/var/lib/kubelet/plugins_registry/compute-domain.nvidia.com-reg.sock"
    )
    assert paths.prepare_lock == Path("/var/lib/kubelet/plugins/compute-domain.nvidia.com/pu.lock")
    assert paths.domain_dir("uid") == Path("/var/lib/kubelet/plugins/compute-domain.nvidia.com/domains/uid")
