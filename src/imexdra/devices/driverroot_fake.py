"""A simulated GB200 node's driver root: the NVIDIA device nodes and capability files the plugin reads.

Regular files stand in for the character devices (a simulated node has no NVIDIA driver); the plugin
accepts them only in simulated mode. ``procfs_fake`` writes the matching ``/proc/devices``.
"""

from __future__ import annotations

from pathlib import Path

from imexdra.devices.procfs_fake import DEFAULT_FABRIC_MGMT_MINOR, write_fabric_mgmt_capability

FAKE_DEVICE_NODES = (
    "nvidia0",
    "nvidia1",
    "nvidia2",
    "nvidia3",
    "nvidiactl",
    "nvidia-uvm",
    "nvidia-caps-imex-channels/channel0",
    f"nvidia-caps/nvidia-cap{DEFAULT_FABRIC_MGMT_MINOR}",
)

FABRIC_MGMT_CAPABILITY = "proc/driver/nvidia/capabilities/fabric-imex-mgmt"


def write_driver_root(root: Path) -> Path:
    """Populate ``root`` with the device nodes and the fabric-imex-mgmt capability; return ``root``."""
    for name in FAKE_DEVICE_NODES:
        path = root / "dev" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(exist_ok=True)
    write_fabric_mgmt_capability(root / FABRIC_MGMT_CAPABILITY)
    return root
