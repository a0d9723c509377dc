"""Where the daemon finds ``nvidia-imex`` and ``nvidia-imex-ctl``: the driver's, mounted by CDI.

The image ships neither program: they belong to the node's NVIDIA driver, and the kubelet plugin's
base CDI spec bind-mounts them from the driver root to ``/usr/bin`` in the daemon's container
(docs/driver-root.md). The daemon looks in ``/usr/bin`` first, then along ``PATH`` as upstream's does,
so a program of the same name earlier on the image's ``PATH`` cannot stand in for the driver's.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

from imexdra.common.errors import ConfigError
from imexdra.devices.driverroot import IMEX_BINARIES

#: Where the base CDI spec mounts the driver's programs.
DRIVER_BINARY_DIR = "/usr/bin"


@dataclass(frozen=True, slots=True)
class ImexBinaries:
    """Absolute paths of the two programs."""

    imex: str
    ctl: str


def search_path(path: str | None = None) -> str:
    """``/usr/bin`` followed by ``path`` (default: this process's ``PATH``)."""
    rest = os.environ.get("PATH", "") if path is None else path
    return os.pathsep.join(part for part in (DRIVER_BINARY_DIR, rest) if part)


def locate(name: str, path: str | None = None) -> str | None:
    """The program ``name`` in ``/usr/bin`` or else along ``path`` (default ``PATH``); None if absent."""
    return shutil.which(name, path=search_path(path))


def find_imex_binaries(path: str | None = None) -> ImexBinaries:
    """Both programs, or a ``ConfigError`` an operator can act on.

    Raises:
        ConfigError: a program is not in the container: the driver root lacks it, so the base CDI
            spec carries no mount for it.

    """
    found: dict[str, str] = {}
    for name in IMEX_BINARIES:
        where = locate(name, path)
        if where is not None:
            found[name] = where
    missing = [name for name in IMEX_BINARIES if name not in found]
    if missing:
        raise ConfigError(
            f"{' and '.join(missing)} not found in this container (searched {search_path(path)}). "
            "The node's NVIDIA "
            "driver install must provide them: the kubelet plugin's base CDI spec mounts "
            f"{', '.join('usr/bin/' + name for name in IMEX_BINARIES)} from the driver root (the chart's "
            "nvidiaDriverRoot) into this container, and has no mount for a program the driver root lacks"
        )
    imex, ctl = IMEX_BINARIES
    return ImexBinaries(imex=found[imex], ctl=found[ctl])
