"""Options of the daemon beyond upstream's: where its files and the IMEX binaries are.

Upstream hard-codes ``/imexd``, ``/etc/hosts`` and ``nvidia-imex``/``nvidia-imex-ctl`` from ``PATH``;
those stay the defaults. They are options because several simulated daemons share one host in the
local cluster and tests, and because an operator debugging a node may want to point at other binaries.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click

from imexdra.api.config.groups import OptionGroup, check_absolute, option
from imexdra.daemon.imexconfig import ImexdPaths

_PATH = click.Path(path_type=Path)


@dataclass(frozen=True, slots=True)
class DaemonFiles:
    """The daemon's IMEX directory, the hosts file it manages and the IMEX executables."""

    imexd_dir: Path
    hosts_file: Path
    nvidia_imex: str
    nvidia_imex_ctl: str

    def __post_init__(self) -> None:
        """Require absolute paths for the files shared with IMEX."""
        check_absolute(self.imexd_dir, field="imexd_dir")
        check_absolute(self.hosts_file, field="hosts_file")

    @property
    def imexd(self) -> ImexdPaths:
        """The files in the IMEX directory."""
        return ImexdPaths(self.imexd_dir)


daemon_file_options = OptionGroup(
    "files",
    DaemonFiles,
    option(
        "--imexd-dir",
        envvar="IMEXD_DIR",
        type=_PATH,
        default=Path("/imexd"),
        help="Directory with the IMEX config template, config and node list.",
    ),
    option(
        "--hosts-file",
        envvar="IMEXD_HOSTS_FILE",
        type=_PATH,
        default=Path("/etc/hosts"),
        help="Hosts file holding the compute-domain-daemon-NNNN mappings (DNS-names mode).",
    ),
    option(
        "--nvidia-imex",
        envvar="NVIDIA_IMEX_BINARY",
        default="nvidia-imex",
        help="The nvidia-imex executable (looked up on PATH unless a path).",
    ),
    option(
        "--nvidia-imex-ctl",
        envvar="NVIDIA_IMEX_CTL_BINARY",
        default="nvidia-imex-ctl",
        help="The nvidia-imex-ctl executable (looked up on PATH unless a path).",
    ),
)
