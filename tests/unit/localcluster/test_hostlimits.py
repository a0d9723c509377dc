"""The machine's inotify instance limit, raised for a cluster's nodes and never lowered."""

from __future__ import annotations

from pathlib import Path

import pytest

from imexdra_sim.localcluster.hostlimits import ensure_inotify_instances
from imexdra_sim.localcluster.processes import ClusterStartError


def test_raised_to_what_the_nodes_need_and_never_lowered(tmp_path: Path) -> None:
    """128 + 32 per node when lower; a higher limit stays as it is."""
    limit = tmp_path / "max_user_instances"
    limit.write_text("128\n")
    ensure_inotify_instances(18, limit_file=limit)
    assert limit.read_text() == f"{128 + 32 * 18}\n"
    limit.write_text("8192\n")
    ensure_inotify_instances(18, limit_file=limit)
    assert limit.read_text() == "8192\n"


def test_a_limit_that_cannot_be_raised_says_what_to_run() -> None:
    """Where the limit cannot be written, the error names the sysctl command. The stand-in is a
    read-only kernel setting that even root cannot write (``kernel.ngroups_max``, 65536)."""
    read_only = Path("/proc/sys/kernel/ngroups_max")
    nodes = 3000  # needs 128 + 32 x 3000 = 96128, more than the 65536 it holds
    with pytest.raises(ClusterStartError, match=r"sysctl -w fs\.inotify\.max_user_instances=96128"):
        ensure_inotify_instances(nodes, limit_file=read_only)
