"""The NVIDIA device nodes present under a dev root (the ``/dev`` boundary).

The base CDI spec's ``all`` device lists every NVIDIA char device the host has
(docs/hardware.md §4): ``/dev/nvidia*``, ``/dev/nvidia-caps/nvidia-cap*`` and
``/dev/nvidia-caps-imex-channels/channel*``, minus the ``nvidia-fs*``, ``nvidia-nvswitch*`` and
``nvidia-nvlink*`` families. Only character devices count, on real and simulated nodes alike (a
simulated node's are made with ``mknod``, docs/driver-root.md).
"""

from __future__ import annotations

import stat
from pathlib import Path

from imexdra.devices.procfs import DeviceDiscoveryError

_GLOBS = ("nvidia*", "nvidia-caps/nvidia-cap*", "nvidia-caps-imex-channels/channel*")
_EXCLUDED_PREFIXES = ("nvidia-fs", "nvidia-nvswitch", "nvidia-nvlink")


def nvidia_device_nodes(dev_root: Path) -> list[tuple[str, Path]]:
    """Return ``(container path, host file)`` for each NVIDIA device under ``<dev_root>/dev``.

    Container paths are absolute (``/dev/nvidia0``); results are sorted by container path.

    Raises:
        DeviceDiscoveryError: no NVIDIA device node was found.

    """
    dev = dev_root / "dev"
    found: dict[str, Path] = {}
    for pattern in _GLOBS:
        for entry in dev.glob(pattern):
            if entry.name.startswith(_EXCLUDED_PREFIXES) or not _is_char_device(entry):
                continue
            found["/dev/" + entry.relative_to(dev).as_posix()] = entry
    if not found:
        raise DeviceDiscoveryError(f"no NVIDIA device nodes found under {dev}")
    return sorted(found.items())


def _is_char_device(entry: Path) -> bool:
    try:
        return stat.S_ISCHR(entry.stat().st_mode)
    except OSError:
        return False
