"""Install the fakes where a driver install has ``nvidia-imex`` and ``nvidia-imex-ctl``.

Each is a self-contained Python zip application (``#!/usr/bin/env python3``): the fake modules and the
few stdlib-only modules they import, with a ``__main__`` that runs the daemon or the control tool by the
name it was started as. Like the real binaries, they depend on nothing of the host but what any
container image that runs them has (here: a ``python3``), so the base CDI spec can bind-mount them
from a node's driver root into an IMEX daemon container of the project's image, and host processes
run them too (docs/driver-root.md). Console scripts are deliberately not installed for the fakes
(they are test equipment, not product).
"""

from __future__ import annotations

import shutil
import tempfile
import zipapp
from dataclasses import dataclass
from pathlib import Path

import imexdra
import imexdra_sim

IMEX_NAME = "nvidia-imex"
CTL_NAME = "nvidia-imex-ctl"
INTERPRETER = "/usr/bin/env python3"

# What the fakes import, per package: all standard library besides these (tests/unit/devices checks
# it). The driver's own IMEX config and error definitions come along, so the fakes parse exactly what
# the daemon writes.
_MODULES = {
    imexdra: (
        "__init__.py",
        "common/__init__.py",
        "common/errors.py",
        "devices/__init__.py",
        "devices/imex.py",
    ),
    imexdra_sim: (
        "__init__.py",
        "devices/__init__.py",
        "devices/fakeimex/__init__.py",
        "devices/fakeimex/ctl.py",
        "devices/fakeimex/daemon.py",
        "devices/fakeimex/nodemap.py",
        "devices/fakeimex/protocol.py",
        "devices/fakeimex/server.py",
    ),
}

_MAIN = '''"""Run the fake nvidia-imex, or nvidia-imex-ctl when started under that name."""
import os
import runpy
import sys

_ctl = os.path.basename(sys.argv[0]).endswith("-ctl")
_module = "imexdra_sim.devices.fakeimex." + ("ctl" if _ctl else "daemon")
runpy.run_module(_module, run_name="__main__", alter_sys=True)
'''


@dataclass(frozen=True, slots=True)
class FakeImexBinaries:
    """Where the programs were written."""

    imex: Path
    ctl: Path

    @property
    def directory(self) -> Path:
        """The directory to put on ``PATH``."""
        return self.imex.parent


def install_fake_imex(directory: Path) -> FakeImexBinaries:
    """Write ``nvidia-imex`` and ``nvidia-imex-ctl`` into ``directory`` (created if needed).

    Existing programs of the same names are replaced by a rename, so a running one keeps its file.
    """
    directory.mkdir(parents=True, exist_ok=True)
    binaries = FakeImexBinaries(imex=directory / IMEX_NAME, ctl=directory / CTL_NAME)
    with tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch) / "app"
        for package, modules in _MODULES.items():
            package_dir = Path(package.__file__ or "").parent
            for module in modules:
                target = source / package.__name__ / module
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(package_dir / module, target)
        (source / "__main__.py").write_text(_MAIN)
        archive = Path(scratch) / "fake-imex.pyz"
        zipapp.create_archive(source, archive, interpreter=INTERPRETER)
        for path in (binaries.imex, binaries.ctl):
            staged = directory / f".{path.name}.tmp"
            shutil.copyfile(archive, staged)
            staged.chmod(0o755)
            staged.replace(path)
    return binaries
