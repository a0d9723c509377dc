"""Finding driver files under the NVIDIA driver root (docs/hardware.md §5, docs/driver-root.md).

The plugin runs in a container with the host's driver install mounted at the container driver root
(``/driver-root`` under Helm). NVML must be loaded from there, ``nvidia-smi`` must exist there, and
``nvidia-imex-ctl`` is looked up under the dev root. Lookups try ``<root>/<name>`` first, then each
search directory in order; a candidate counts only if it resolves (symlinks followed) to a regular
file, so a directory named like the library cannot shadow the real file further down the list.

``driver_binaries`` finds the driver programs the base CDI spec mounts into containers
(``nvidia-imex`` and ``nvidia-imex-ctl``, docs/driver-root.md): only the search directories count and
the file must be executable; its path is kept as found under the root (not resolved), because the
container runtime resolves it on the host, where the driver root's own symlinks point right.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from imexdra.devices.procfs import DeviceDiscoveryError

LIBRARY_DIRS = (
    "/usr/lib64",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/lib64",
    "/lib/x86_64-linux-gnu",
    "/lib/aarch64-linux-gnu",
)
BINARY_DIRS = ("/opt/bin", "/usr/bin", "/usr/sbin", "/bin", "/sbin")
NVML_LIBRARY = "libnvidia-ml.so.1"
IMEX_BINARIES = ("nvidia-imex", "nvidia-imex-ctl")
"""The driver programs the compute-domain daemon runs, which the base CDI spec carries."""


def find_file(root: Path, name: str, search_dirs: Sequence[str]) -> Path:
    """Return the resolved path of the first regular file ``name`` under ``root``.

    Raises:
        DeviceDiscoveryError: no candidate resolves to a regular file.

    """
    candidates = [root / name, *(root / directory.lstrip("/") / name for directory in search_dirs)]
    for candidate in candidates:
        try:
            resolved = candidate.resolve(strict=True)
        except (OSError, RuntimeError):
            continue
        if resolved.is_file():
            return resolved
    raise DeviceDiscoveryError(f"{name} not found under {root} (searched {', '.join(search_dirs)})")


def find_nvml_library(driver_root: Path) -> Path:
    """``libnvidia-ml.so.1`` under the driver root."""
    return find_file(driver_root, NVML_LIBRARY, LIBRARY_DIRS)


def driver_binaries(driver_root: Path, names: Sequence[str] = IMEX_BINARIES) -> dict[str, Path]:
    """Each of ``names`` found as an executable file in the driver root's binary directories.

    Names not found are left out: the caller decides whether a missing program matters.
    """
    found: dict[str, Path] = {}
    for name in names:
        for directory in BINARY_DIRS:
            candidate = driver_root / directory.lstrip("/") / name
            if candidate.is_file() and os.access(candidate, os.X_OK):
                found[name] = candidate
                break
    return found


def dev_root(driver_root: Path) -> Path:
    """The root holding ``/dev``: the driver root if it has a ``dev`` directory, else ``/``."""
    return driver_root if (driver_root / "dev").is_dir() else Path("/")
