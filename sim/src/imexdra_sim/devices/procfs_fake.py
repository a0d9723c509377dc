"""Writers for the procfs files of a simulated node, read back by ``procfs.HostImexDevices``.

The contents mirror what upstream's mock setup produces (docs/hardware.md §8): a ``/proc/devices``
with ``nvidia-caps-imex-channels`` at 235 and ``nvidia-caps`` at 236 inserted before
``Block devices:``, and a fabric-imex-mgmt capability with minor 512 and mode 438 (0o666); and the
driver's ``params`` file with its ``ImexChannelCount`` (2048 unless a test wants a smaller pool).
"""

from __future__ import annotations

from pathlib import Path

from imexdra.devices.procfs import (
    IMEX_CHANNEL_COUNT,
    IMEX_CHANNEL_COUNT_PARAM,
    IMEX_CHANNELS_DEVICE,
    NVIDIA_CAPS_DEVICE,
)

DEFAULT_IMEX_CHANNELS_MAJOR = 235
DEFAULT_NVIDIA_CAPS_MAJOR = 236
DEFAULT_FABRIC_MGMT_MINOR = 512
DEFAULT_FABRIC_MGMT_MODE = 438

# A trimmed but realistic host /proc/devices (majors right-aligned as the kernel prints them).
_BASE_CHAR_DEVICES = ("  1 mem", "  4 /dev/vc/0", "  4 tty", "195 nvidia-frontend", "508 nvidia-uvm")
_BASE_BLOCK_DEVICES = ("  7 loop", "  8 sd", "259 blkext")


def proc_devices_text(
    *,
    imex_channels_major: int | None = DEFAULT_IMEX_CHANNELS_MAJOR,
    nvidia_caps_major: int | None = DEFAULT_NVIDIA_CAPS_MAJOR,
) -> str:
    """A ``/proc/devices`` text; pass None to leave an entry out (a host without IMEX support)."""
    char_lines = list(_BASE_CHAR_DEVICES)
    if imex_channels_major is not None:
        char_lines.append(f"{imex_channels_major:3d} {IMEX_CHANNELS_DEVICE}")
    if nvidia_caps_major is not None:
        char_lines.append(f"{nvidia_caps_major:3d} {NVIDIA_CAPS_DEVICE}")
    lines = ["Character devices:", *char_lines, "", "Block devices:", *_BASE_BLOCK_DEVICES]
    return "\n".join(lines) + "\n"


def write_proc_devices(
    path: Path,
    *,
    imex_channels_major: int | None = DEFAULT_IMEX_CHANNELS_MAJOR,
    nvidia_caps_major: int | None = DEFAULT_NVIDIA_CAPS_MAJOR,
) -> Path:
    """Write a fake ``/proc/devices`` to ``path`` and return it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        proc_devices_text(imex_channels_major=imex_channels_major, nvidia_caps_major=nvidia_caps_major),
        encoding="utf-8",
    )
    return path


def write_fabric_mgmt_capability(
    path: Path,
    *,
    minor: int = DEFAULT_FABRIC_MGMT_MINOR,
    mode: int = DEFAULT_FABRIC_MGMT_MODE,
    modify: int = 0,
) -> Path:
    """Write a fake fabric-imex-mgmt capability file (decimal values, as the driver prints them)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"DeviceFileMinor: {minor}\nDeviceFileMode: {mode}\nDeviceFileModify: {modify}\n", encoding="utf-8"
    )
    return path


def write_driver_params(path: Path, *, imex_channel_count: int | None = IMEX_CHANNEL_COUNT) -> Path:
    """Write a fake ``/proc/driver/nvidia/params`` (a few of the driver's lines; None: no IMEX channels)."""
    lines = ["ResmanDebugLevel: 4294967295", "ModifyDeviceFiles: 1", "EnableMSI: 1"]
    if imex_channel_count is not None:
        lines.append(f"{IMEX_CHANNEL_COUNT_PARAM}: {imex_channel_count}")
    lines.append("CreateImexChannel0: 0")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
