"""Options of the daemon beyond upstream's: where its files are.

Upstream hard-codes ``/imexd`` and ``/etc/hosts``; those stay the defaults. They are options because
several daemons share one host in the local cluster's integration tests. The IMEX programs are not
options: they are the driver's, mounted by the base CDI spec (``daemon.imexbinaries``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click

from imexdra.api.flags.groups import OptionGroup, check_absolute, option
from imexdra.daemon.imexconfig import ImexdPaths

_PATH = click.Path(path_type=Path)


@dataclass(frozen=True, slots=True)
class DaemonFiles:
    """The daemon's IMEX directory and the hosts file it manages."""

    imexd_dir: Path
    hosts_file: Path

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
        help="Hosts file holding the compute-domain-daemon-<hash>-NNNN mappings (DNS-names mode).",
    ),
)
