"""The NVIDIA device nodes present under a dev root (the ``/dev`` boundary).

The base CDI spec's ``all`` device lists every NVIDIA char device the host has
(docs/hardware.md §4): ``/dev/nvidia*``, ``/dev/nvidia-caps/nvidia-cap*`` and
``/dev/nvidia-caps-imex-channels/channel*``, minus the ``nvidia-fs*``, ``nvidia-nvswitch*`` and
``nvidia-nvlink*`` families. A simulated node's dev root holds regular files instead of device
nodes (creating char devices needs privileges), so ``require_char_device=False`` accepts those.
"""

from __future__ import annotations

import stat
from pathlib import Path

from imexdra.devices.procfs import DeviceDiscoveryError

_GLOBS = ("nvidia*", "nvidia-caps/nvidia-cap*", "nvidia-caps-imex-channels/channel*")
_EXCLUDED_PREFIXES = ("nvidia-fs", "nvidia-nvswitch", "nvidia-nvlink")


def nvidia_device_nodes(dev_root: Path, *, require_char_device: bool = True) -> list[tuple[str, Path]]:
    """Return ``(container path, host file)`` for each NVIDIA device under ``<dev_root>/dev``.

    Container paths are absolute (``/dev/nvidia0``); results are sorted by container path.

    Raises:
        DeviceDiscoveryError: no NVIDIA device node was found.

    """
    dev = dev_root / "dev"
    found: dict[str, Path] = {}
    for pattern in _GLOBS:
        for entry in dev.glob(pattern):
            if entry.name.startswith(_EXCLUDED_PREFIXES) or not _is_device(entry, require_char_device):
                continue
            found["/dev/" + entry.relative_to(dev).as_posix()] = entry
    if not found:
        raise DeviceDiscoveryError(f"no NVIDIA device nodes found under {dev}")
    return sorted(found.items())


def _is_device(entry: Path, require_char_device: bool) -> bool:
    try:
        mode = entry.stat().st_mode
    except OSError:
        return False
    return stat.S_ISCHR(mode) if require_char_device else not stat.S_ISDIR(mode)
