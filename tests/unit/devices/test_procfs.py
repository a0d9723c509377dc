"""/proc/devices parsing, the fabric-imex-mgmt capability and HostImexDevices over fake files."""

from pathlib import Path

import pytest

from imexdra.devices.procfs import (
    CharDevice,
    DeviceDiscoveryError,
    HostImexDevices,
    parse_char_device_major,
    parse_nvcap_info,
    read_imex_channel_count,
)
from imexdra_sim.devices.procfs_fake import (
    proc_devices_text,
    write_driver_params,
    write_fabric_mgmt_capability,
    write_proc_devices,
)

REAL_SHAPE = """Character devices:
  1 mem
  4 /dev/vc/0
195 nvidia-frontend
234 nvidia-caps-imex-channels
235 nvidia-caps
511 nvidia-caps-imex-channels-extra

Block devices:
  7 loop
240 nvidia-caps
"""


@pytest.mark.parametrize(
    ("text", "name", "expected"),
    [
        (REAL_SHAPE, "nvidia-caps-imex-channels", 234),
        (REAL_SHAPE, "nvidia-caps", 235),
        (REAL_SHAPE, "mem", 1),
        ("Character devices:\n 10 a\n 11 a\n", "a", 10),
        ("Character devices:\n 12 x\n", "x", 12),
    ],
    ids=["imex-channels", "caps-not-prefix-of-longer", "right-aligned", "first-wins", "no-block-section"],
)
def test_parse_char_device_major(text: str, name: str, expected: int) -> None:
    """The whole-name entry in the Character devices section gives the major."""
    assert parse_char_device_major(text, name, source="/proc/devices") == expected


@pytest.mark.parametrize(
    ("text", "name"),
    [
        (REAL_SHAPE, "nvidia"),
        ("Character devices:\n  1 mem\nBlock devices:\n  9 md\n", "md"),
        ("  5 early\nCharacter devices:\n", "early"),
        ("Character devices:\n9999999999 big\n", "big"),
    ],
    ids=["prefix-only", "block-only", "before-section", "int32-overflow"],
)
def test_parse_char_device_major_rejects(text: str, name: str) -> None:
    """Prefix matches, block devices, entries outside the section and huge majors are errors."""
    with pytest.raises(DeviceDiscoveryError, match="error parsing '/p'"):
        parse_char_device_major(text, name, source="/p")


def test_parse_nvcap_info_is_decimal() -> None:
    """DeviceFileMode 438 is 0o666: the values are decimal, not octal."""
    info = parse_nvcap_info("DeviceFileMinor: 512\nDeviceFileMode: 438\nDeviceFileModify: 0\n", source="c")
    assert (info.minor, info.mode, info.modify) == (512, 0o666, 0)


@pytest.mark.parametrize(
    "text",
    [
        "DeviceFileMinor: 1\nDeviceFileMode: 256\n",
        "DeviceFileMinor: x\nDeviceFileMode: 1\nDeviceFileModify: 0\n",
    ],
    ids=["missing-key", "not-a-number"],
)
def test_parse_nvcap_info_rejects(text: str) -> None:
    """A capability file missing a key or holding a non-number is a discovery error."""
    with pytest.raises(DeviceDiscoveryError, match="error parsing 'cap'"):
        parse_nvcap_info(text, source="cap")


def test_host_imex_devices_over_fake_files(tmp_path: Path) -> None:
    """Pointed at fake files, HostImexDevices yields upstream's channel and capability nodes."""
    devices = HostImexDevices(
        proc_devices=write_proc_devices(tmp_path / "proc-devices"),
        fabric_mgmt_capability=write_fabric_mgmt_capability(tmp_path / "caps" / "fabric-imex-mgmt"),
    )
    assert devices.channel_count == 2048
    assert devices.channel(0) == CharDevice("/dev/nvidia-caps-imex-channels/channel0", 235, 0, 0o666)
    assert devices.channel(2047).path.endswith("/channel2047")
    assert devices.fabric_mgmt() == CharDevice("/dev/nvidia-caps/nvidia-cap512", 236, 512, 438)


@pytest.mark.parametrize("channel", [-1, 2048], ids=["negative", "past-end"])
def test_channel_out_of_range(tmp_path: Path, channel: int) -> None:
    """Channel IDs outside 0..2047 are rejected."""
    devices = HostImexDevices(proc_devices=write_proc_devices(tmp_path / "pd"))
    with pytest.raises(DeviceDiscoveryError, match="out of range"):
        devices.channel(channel)


def test_missing_imex_major_fails_construction(tmp_path: Path) -> None:
    """A host without nvidia-caps-imex-channels cannot construct the device source (upstream: fatal)."""
    path = write_proc_devices(tmp_path / "pd", imex_channels_major=None)
    with pytest.raises(DeviceDiscoveryError, match="nvidia-caps-imex-channels"):
        HostImexDevices(proc_devices=path)


def test_missing_files_are_discovery_errors(tmp_path: Path) -> None:
    """Missing /proc/devices or capability files become discovery errors naming the path."""
    with pytest.raises(DeviceDiscoveryError, match="absent"):
        HostImexDevices(proc_devices=tmp_path / "absent")
    devices = HostImexDevices(
        proc_devices=write_proc_devices(tmp_path / "pd"), fabric_mgmt_capability=tmp_path / "nocap"
    )
    with pytest.raises(DeviceDiscoveryError, match="nocap"):
        devices.fabric_mgmt()


def test_fake_text_keeps_entries_out_of_block_section() -> None:
    """The fake /proc/devices puts the NVIDIA entries among character devices, before Block devices."""
    text = proc_devices_text(imex_channels_major=300)
    assert text.index("300 nvidia-caps-imex-channels") < text.index("Block devices:")
    assert parse_char_device_major(text, "nvidia-caps-imex-channels", source="fake") == 300


def test_imex_channel_count_from_driver_params(tmp_path: Path) -> None:
    """ImexChannelCount is read from the driver's params file, among its other lines."""
    params = write_driver_params(tmp_path / "params", imex_channel_count=16)
    assert read_imex_channel_count(params) == 16
    assert read_imex_channel_count(write_driver_params(tmp_path / "default")) == 2048


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ModifyDeviceFiles: 1\n", "no ImexChannelCount"),
        ("ImexChannelCount: lots\n", "'lots' is not a count"),
        ("ImexChannelCount: -4\n", "'-4' is not a count"),
        ("ImexChannelCount: \u0663\n", "is not a count"),
        (f"ImexChannelCount: {'9' * 30}\n", "is not a count"),
    ],
    ids=["absent", "word", "negative", "non-ascii-digit", "overflow"],
)
def test_imex_channel_count_refuses_what_is_not_a_count(tmp_path: Path, text: str, message: str) -> None:
    """A params file without a decimal ImexChannelCount is a DeviceDiscoveryError naming the problem."""
    params = tmp_path / "params"
    params.write_text(text, encoding="utf-8")
    with pytest.raises(DeviceDiscoveryError, match=message):
        read_imex_channel_count(params)


def test_imex_channel_count_of_a_missing_file(tmp_path: Path) -> None:
    """A driver without the params file (none loaded) is a DeviceDiscoveryError naming the path."""
    with pytest.raises(DeviceDiscoveryError, match="error reading"):
        read_imex_channel_count(tmp_path / "absent")


def test_channels_lost_reads_proc_devices_each_time(tmp_path: Path) -> None:
    """None while the major is the one read at start; the entry gone or moved says so and how to mend."""
    path = write_proc_devices(tmp_path / "pd")
    devices = HostImexDevices(proc_devices=path)
    assert devices.channels_lost() is None
    write_proc_devices(path, imex_channels_major=None)
    lost = devices.channels_lost()
    assert lost is not None and "nvidia-caps-imex-channels" in lost and "was major 235" in lost
    write_proc_devices(path, imex_channels_major=240)
    moved = devices.channels_lost()
    assert moved is not None and "major 240" in moved and "restart the plugin" in moved
    write_proc_devices(path)
    assert devices.channels_lost() is None
