"""Running the ``imexdra`` console script of this environment against a local cluster."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from imexdra_sim.localcluster.cluster import LocalCluster

IMEXDRA = str(Path(sys.executable).parent / "imexdra")
"""The console script installed beside the interpreter running the tests."""


def imexdra(cluster: LocalCluster, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``imexdra ARGS --kubeconfig <cluster's>``; its exit code is the caller's to judge."""
    return subprocess.run(
        [IMEXDRA, *args, "--kubeconfig", str(cluster.kubeconfig)],
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )
