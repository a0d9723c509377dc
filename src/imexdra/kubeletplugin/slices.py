"""The node's allocatable devices and the device list it publishes in its ResourceSlice.

Allocatable: ``channel-0 .. channel-<count-1>`` and ``daemon-0``. Published (docs/data-path.md §4):
``channel-0`` and ``daemon-0``; under HostManagedIMEX only ``channel-0`` — the host runs nvidia-imex,
so no daemon device exists (docs/data-path.md §10); under channel isolation (host-managed only)
``channel-1 .. channel-<count-1>`` and not channel 0, one device per channel so that the scheduler
keeps two domains off one channel of a node (docs/channel-isolation.md §5). Each device carries
exactly two attributes in the driver's own domain, written unqualified as upstream does: ``type``
(string ``channel``/``daemon``) and ``id`` (int), i.e. ``compute-domain.nvidia.com/type`` and ``.../id``.
Under gate ComputeDomainBindingConditions every channel device also carries the binding condition
``IMEXDaemonReady`` and the binding failure condition ``IMEXDaemonFailed`` (docs/binding-conditions.md);
without it a slice is upstream's.

Pure data: ``imexdra.dra.slicepublisher`` splits the list into slices and talks to the API. Unlike
upstream (Go map order), the device order is stable, so a restart never rewrites an unchanged slice.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from imexdra.api.constants import (
    BINDING_CONDITION_DAEMON_READY,
    BINDING_FAILURE_CONDITION,
    DEVICE_ATTRIBUTE_ID,
    DEVICE_ATTRIBUTE_TYPE,
    DeviceType,
)
from imexdra.api.imexmode import ImexManagement
from imexdra.devices.procfs import IMEX_CHANNEL_COUNT

_DEVICE_NAME = re.compile(r"(channel|daemon)-(0|[1-9][0-9]*)")


@dataclass(frozen=True, slots=True)
class AllocatableDevice:
    """A channel or daemon device this node can prepare."""

    type: DeviceType
    id: int

    @property
    def name(self) -> str:
        """``channel-<id>`` or ``daemon-<id>``."""
        return f"{self.type.value}-{self.id}"

    def slice_entry(self, *, binding_conditions: bool = False) -> dict[str, Any]:
        """The ``spec.devices[]`` entry for this device (a channel's with binding conditions if asked)."""
        entry: dict[str, Any] = {
            "name": self.name,
            "attributes": {
                DEVICE_ATTRIBUTE_TYPE: {"string": self.type.value},
                DEVICE_ATTRIBUTE_ID: {"int": self.id},
            },
        }
        if binding_conditions and self.type == DeviceType.CHANNEL:
            entry["bindingConditions"] = [BINDING_CONDITION_DAEMON_READY]
            entry["bindingFailureConditions"] = [BINDING_FAILURE_CONDITION]
        return entry


def allocatable_devices(channel_count: int = IMEX_CHANNEL_COUNT) -> dict[str, AllocatableDevice]:
    """Every device this node can prepare, by name: all channels, then ``daemon-0``."""
    devices = [AllocatableDevice(DeviceType.CHANNEL, n) for n in range(channel_count)]
    devices.append(AllocatableDevice(DeviceType.DAEMON, 0))
    return {device.name: device for device in devices}


def parse_device_name(name: str) -> AllocatableDevice | None:
    """The device a name denotes, or None if it is not a channel/daemon device name."""
    match = _DEVICE_NAME.fullmatch(name)
    if match is None:
        return None
    return AllocatableDevice(DeviceType(match.group(1)), int(match.group(2)))


def published_devices(
    allocatable: dict[str, AllocatableDevice], *, imex: ImexManagement, channel_isolation: bool = False
) -> list[AllocatableDevice]:
    """The subset advertised to the scheduler, channels first, by ID (see the module docstring)."""

    def published(device: AllocatableDevice) -> bool:
        if device.type not in imex.published_device_types:
            return False
        if device.type == DeviceType.DAEMON:
            return True
        return device.id >= 1 if channel_isolation else device.id == 0

    chosen = [device for device in allocatable.values() if published(device)]
    return sorted(chosen, key=lambda device: (device.type != DeviceType.CHANNEL, device.id))


def slice_devices(
    *,
    imex: ImexManagement,
    channel_isolation: bool = False,
    channel_count: int = IMEX_CHANNEL_COUNT,
    binding_conditions: bool = False,
) -> list[dict[str, Any]]:
    """The ``spec.devices`` entries of the node's pool, in publishing order."""
    devices = published_devices(
        allocatable_devices(channel_count), imex=imex, channel_isolation=channel_isolation
    )
    return [device.slice_entry(binding_conditions=binding_conditions) for device in devices]
