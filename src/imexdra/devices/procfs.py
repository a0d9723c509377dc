"""The IMEX character devices as the kernel announces them in procfs.

Owns the ``ImexDevices`` Protocol and its one implementation, ``HostImexDevices``, which reads:

- ``/proc/devices`` for the majors of ``nvidia-caps-imex-channels`` (the IMEX channels) and
  ``nvidia-caps`` (the fabric-imex-mgmt capability) — docs/hardware.md §1, §2;
- ``/proc/driver/nvidia/capabilities/fabric-imex-mgmt`` for the capability's minor and mode
  (docs/hardware.md §3);
- ``/proc/driver/nvidia/params`` for ``ImexChannelCount``, the driver's ``NVreg_ImexChannelCount``
  (``read_imex_channel_count``; channel isolation checks it, docs/channel-isolation.md §3).

There is no fake class: a simulated node is this same class pointed at other files (upstream does the
same with ``ALT_PROC_DEVICES_PATH``); ``imexdra_sim.devices.procfs_fake`` writes such files. The
channel count is the install's setting (2048 by default, the number upstream hard-codes); the
allocatable set never depends on GPU enumeration.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from imexdra.common.errors import PermanentError

PROC_DEVICES = Path("/proc/devices")
FABRIC_IMEX_MGMT_CAPABILITY = Path("/proc/driver/nvidia/capabilities/fabric-imex-mgmt")
DRIVER_PARAMS = Path("/proc/driver/nvidia/params")
IMEX_CHANNEL_COUNT_PARAM = "ImexChannelCount"
IMEX_CHANNELS_DEVICE = "nvidia-caps-imex-channels"
NVIDIA_CAPS_DEVICE = "nvidia-caps"
IMEX_CHANNEL_COUNT = 2048
IMEX_CHANNEL_MODE = 0o666
_INT32_MAX = 2**31 - 1

# ASCII digits and blanks only, as Go's regexp reads them (Python's \d would accept e.g. "٣").
_ENTRY = re.compile(r"^\s*(\d+) (.+)$", re.ASCII)
#: More digits than this cannot fit an int32 (and int() refuses strings over 4300 digits).
_INT32_DIGITS = len(str(_INT32_MAX))


class DeviceDiscoveryError(PermanentError):
    """A required device is not announced by the kernel, or its procfs entry cannot be parsed."""


@dataclass(frozen=True, slots=True)
class CharDevice:
    """A character device node to inject into a container; ``file_mode`` as in CDI (e.g. 0o666)."""

    path: str
    major: int
    minor: int
    file_mode: int


@dataclass(frozen=True, slots=True)
class NvCapInfo:
    """An NVIDIA capability file (``DeviceFileMinor``, ``DeviceFileMode``, ``DeviceFileModify``)."""

    minor: int
    mode: int
    modify: int


class ImexDevices(Protocol):
    """The IMEX device nodes a node offers to containers."""

    @property
    def channel_count(self) -> int:
        """How many IMEX channels exist (channel IDs are ``0 .. channel_count - 1``)."""
        ...

    def channel(self, channel_id: int) -> CharDevice:
        """The device node of IMEX channel ``channel_id``."""
        ...

    def fabric_mgmt(self) -> CharDevice:
        """The fabric-imex-mgmt capability device node (the IMEX daemon's management access)."""
        ...


class HostImexDevices:
    """``ImexDevices`` from procfs files; other paths make it read a simulated node's files.

    The channel major is read once at construction (upstream refuses to start without it); the
    capability is read on each ``fabric_mgmt()`` call, since only daemon claims on fabric nodes need it.

    Raises:
        DeviceDiscoveryError: at construction, when ``nvidia-caps-imex-channels`` is not announced.

    """

    def __init__(
        self,
        *,
        proc_devices: Path = PROC_DEVICES,
        fabric_mgmt_capability: Path = FABRIC_IMEX_MGMT_CAPABILITY,
        channel_count: int = IMEX_CHANNEL_COUNT,
    ) -> None:
        self._proc_devices = proc_devices
        self._fabric_mgmt_capability = fabric_mgmt_capability
        self._channel_count = channel_count
        self._channel_major = read_char_device_major(proc_devices, IMEX_CHANNELS_DEVICE)

    def channels_lost(self) -> str | None:
        """Why the channels' device nodes no longer work, read from ``/proc/devices`` now; None if they do.

        The channels' major was read at construction and every CDI spec names it; a driver unloaded (the
        entry gone) or reloaded under another major leaves those nodes pointing at nothing.
        """
        try:
            major = read_char_device_major(self._proc_devices, IMEX_CHANNELS_DEVICE)
        except DeviceDiscoveryError as error:
            return f"{error} (it was major {self._channel_major} when the plugin started)"
        if major != self._channel_major:
            return (
                f"{IMEX_CHANNELS_DEVICE} is major {major} in {self._proc_devices}, but was "
                f"{self._channel_major} when the plugin started and wrote its CDI specs: restart the plugin"
            )
        return None

    @property
    def channel_count(self) -> int:
        """The install's channel count (``--imex-channel-count``), 2048 by default."""
        return self._channel_count

    def channel(self, channel_id: int) -> CharDevice:
        """``/dev/nvidia-caps-imex-channels/channel<N>``, minor N, mode 0666."""
        if not 0 <= channel_id < self._channel_count:
            raise DeviceDiscoveryError(f"IMEX channel {channel_id} out of range [0, {self._channel_count})")
        return CharDevice(
            path=f"/dev/{IMEX_CHANNELS_DEVICE}/channel{channel_id}",
            major=self._channel_major,
            minor=channel_id,
            file_mode=IMEX_CHANNEL_MODE,
        )

    def fabric_mgmt(self) -> CharDevice:
        """``/dev/nvidia-caps/nvidia-cap<minor>`` with the capability's mode and ``nvidia-caps`` major."""
        try:
            text = self._fabric_mgmt_capability.read_text(encoding="utf-8")
        except OSError as error:
            raise DeviceDiscoveryError(
                f"cannot read fabric-imex-mgmt capability {self._fabric_mgmt_capability}: {error}"
            ) from error
        info = parse_nvcap_info(text, source=str(self._fabric_mgmt_capability))
        return CharDevice(
            path=f"/dev/nvidia-caps/nvidia-cap{info.minor}",
            major=read_char_device_major(self._proc_devices, NVIDIA_CAPS_DEVICE),
            minor=info.minor,
            file_mode=info.mode,
        )


def read_char_device_major(proc_devices: Path, name: str) -> int:
    """Read ``proc_devices`` and return the major of character device ``name``."""
    try:
        text = proc_devices.read_text(encoding="utf-8")
    except OSError as error:
        raise DeviceDiscoveryError(f"error reading '{proc_devices}': {error}") from error
    return parse_char_device_major(text, name, source=str(proc_devices))


def parse_char_device_major(text: str, name: str, *, source: str) -> int:
    """Find ``name``'s major in the ``Character devices:`` section of a ``/proc/devices`` text.

    The name must match a whole entry (``nvidia-caps`` does not match ``nvidia-caps-imex-channels``);
    the first matching entry wins; entries under ``Block devices:`` are ignored.

    Raises:
        DeviceDiscoveryError: no such character device, or its major does not fit an int32.

    """
    in_char_section = False
    for line in text.splitlines():
        if line.startswith("Character devices:"):
            in_char_section = True
            continue
        if line.startswith("Block devices:"):
            break
        match = _ENTRY.match(line) if in_char_section else None
        if match is not None and match.group(2) == name:
            digits = match.group(1).lstrip("0") or "0"
            if len(digits) > _INT32_DIGITS or int(digits) > _INT32_MAX:
                raise DeviceDiscoveryError(
                    f"error parsing '{source}': major {digits[:20]} of {name} overflows int32"
                )
            return int(digits)
    raise DeviceDiscoveryError(
        f"error parsing '{source}': unexpected regex match: no character device named {name!r}"
    )


def parse_nvcap_info(text: str, *, source: str) -> NvCapInfo:
    """Parse an NVIDIA capability file; values are decimal (``DeviceFileMode: 438`` is 0o666).

    Raises:
        DeviceDiscoveryError: a key is missing or a value is not a decimal integer.

    """
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            values[key.strip()] = value.strip()
    try:
        return NvCapInfo(
            minor=int(values["DeviceFileMinor"]),
            mode=int(values["DeviceFileMode"]),
            modify=int(values["DeviceFileModify"]),
        )
    except KeyError as error:
        raise DeviceDiscoveryError(f"error parsing '{source}': missing {error.args[0]}") from error
    except ValueError as error:
        raise DeviceDiscoveryError(f"error parsing '{source}': {error}") from error


def read_imex_channel_count(params: Path) -> int:
    """The driver's ``ImexChannelCount`` from its params file (``Name: value`` lines, decimal).

    Raises:
        DeviceDiscoveryError: the file cannot be read, has no ``ImexChannelCount`` (a driver without
            IMEX channels) or its value is not a decimal integer.

    """
    try:
        text = params.read_text(encoding="utf-8")
    except OSError as error:
        raise DeviceDiscoveryError(f"error reading '{params}': {error}") from error
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == IMEX_CHANNEL_COUNT_PARAM:
            digits = value.strip()
            if not (digits.isascii() and digits.isdigit()) or len(digits) > _INT32_DIGITS:
                raise DeviceDiscoveryError(
                    f"error parsing '{params}': {IMEX_CHANNEL_COUNT_PARAM} {digits[:20]!r} is not a count"
                )
            return int(digits)
    raise DeviceDiscoveryError(
        f"error parsing '{params}': no {IMEX_CHANNEL_COUNT_PARAM} (this driver has no IMEX channels)"
    )
