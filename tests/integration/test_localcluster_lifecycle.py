"""The local cluster's owner dying of SIGTERM still stops the cluster (no orphaned control plane).

A left-over control plane holds ports, memory and the MPI Operator's host-wide lock, which stalled a
later rack until it was killed by hand; ``exit_on_sigterm`` makes ``with LocalCluster(...)`` unwind.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from tests.processes import processes_mentioning

pytestmark = pytest.mark.integration

OWNER = """
import sys, time
from imexdra_sim.localcluster.cluster import LocalCluster
with LocalCluster(nodes_specs=[]) as cluster:
    print("run_dir", cluster.run_dir, flush=True)
    time.sleep(600)
"""


def test_sigterm_to_the_owner_stops_every_cluster_process() -> None:
    """etcd and kube-apiserver (own sessions) go when their owner is SIGTERMed; it exits 143."""
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        assert owner.stdout is not None
        lines = (line.split() for line in owner.stdout)  # its log lines go to stdout as well
        run_dir = next((words[1] for words in lines if words[:1] == ["run_dir"]), "")
        assert run_dir, "the owner did not start its cluster"
        assert processes_mentioning(run_dir), "no cluster process found to begin with"
        owner.send_signal(signal.SIGTERM)
        assert owner.wait(timeout=60) == 128 + signal.SIGTERM
        deadline = time.monotonic() + 10
        while processes_mentioning(run_dir) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert processes_mentioning(run_dir) == {}
    finally:
        if owner.poll() is None:  # a failure before the SIGTERM: let the owner clean up all the same
            owner.send_signal(signal.SIGTERM)
            owner.wait(timeout=60)
