"""Put the fake binaries on a ``PATH`` as ``nvidia-imex`` and ``nvidia-imex-ctl``.

Console scripts are deliberately not installed for the fakes (they are test equipment, not product);
instead a test or the demo writes two small wrapper scripts into a directory of its choice and puts
that directory on the ``PATH`` of whatever runs the real binaries, e.g. a simulated daemon pod.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

IMEX_NAME = "nvidia-imex"
CTL_NAME = "nvidia-imex-ctl"


@dataclass(frozen=True, slots=True)
class FakeImexBinaries:
    """Where the wrapper scripts were written."""

    imex: Path
    ctl: Path

    @property
    def directory(self) -> Path:
        """The directory to put on ``PATH``."""
        return self.imex.parent


def _wrapper(python: str, module: str) -> str:
    return f'#!/bin/sh\nexec {shlex.quote(python)} -m {module} "$@"\n'


def install_fake_imex(directory: Path, *, python: str | None = None) -> FakeImexBinaries:
    """Write ``nvidia-imex`` and ``nvidia-imex-ctl`` into ``directory`` (created if needed).

    Args:
        directory: where the scripts go; existing scripts of the same names are replaced.
        python: the interpreter that has ``imexdra`` installed (default: the running one).

    """
    interpreter = python or sys.executable
    directory.mkdir(parents=True, exist_ok=True)
    binaries = FakeImexBinaries(imex=directory / IMEX_NAME, ctl=directory / CTL_NAME)
    for path, module in (
        (binaries.imex, "imexdra.devices.fakeimex.daemon"),
        (binaries.ctl, "imexdra.devices.fakeimex.ctl"),
    ):
        path.write_text(_wrapper(interpreter, module))
        path.chmod(0o755)
    return binaries
