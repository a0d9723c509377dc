"""What the plugin tells the kubelet of its devices' health (docs/device-health.md).

Every device the node publishes (channels and the daemon device) is one of the kernel's IMEX channel
device nodes, or needs them, so one check decides for all: the ``nvidia-caps-imex-channels`` entry of
``/proc/devices`` still has the major the plugin started with (``HostImexDevices.channels_lost``). It is
read each time the resource-health stream sends (``dra.resourcehealth``), a file read every 30 s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from imexdra.devices.procfs import HostImexDevices
from imexdra.dra.resourcehealth import DeviceHealth


def device_health_check(devices: HostImexDevices, names: Sequence[str]) -> Callable[[], list[DeviceHealth]]:
    """The check of the published devices ``names``, for ``ResourceHealthServicer``."""

    def check() -> list[DeviceHealth]:
        lost = devices.channels_lost()
        return [DeviceHealth(device=name, healthy=lost is None, message=lost or "") for name in names]

    return check
