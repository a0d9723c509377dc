"""Stopping the local cluster leaves nothing on the machine: no process, no cgroup.

A left-over control plane holds ports, memory and the MPI Operator's host-wide lock, which stalled a
later rack until it was killed by hand; ``exit_on_sigterm`` makes ``with LocalCluster(...)`` unwind
even when its owner dies of SIGTERM. Left-over cgroups made every later containerd node slower.
"""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.localcluster.nodes import NodeSpec
from tests.processes import processes_mentioning
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

OWNER = """
import sys, time
from imexdra_sim.localcluster.cluster import LocalCluster
with LocalCluster(nodes_specs=[]) as cluster:
    print("run_dir", cluster.run_dir, flush=True)
    time.sleep(600)  # the owner lives until the test's SIGTERM
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
        wait_until(
            "no cluster process left", lambda: not processes_mentioning(run_dir), timeout=10, interval=0.2
        )
    finally:
        if owner.poll() is None:  # a failure before the SIGTERM: let the owner clean up all the same
            owner.send_signal(signal.SIGTERM)
            owner.wait(timeout=60)


def test_stopping_a_containerd_cluster_removes_its_cgroups() -> None:
    """Killed shims leave their containers' cgroups; stop removes the run's whole subtree.

    They used to stay on the machine, and every later node's cAdvisor watched them all
    (docs/node-runtime.md §9).
    """
    cluster = LocalCluster(nodes_specs=[NodeSpec(name="cg-0", runtime="containerd")])
    with cluster:
        cgroups = [node.cgroup for node in (cluster.control_plane, *cluster.nodes) if node and node.cgroup]
        assert len(cgroups) == 2
        trees = {path.parent for cgroup in cgroups for path in cgroup.paths()}
        # CoreDNS runs on the control-plane node: at least one container cgroup in each hierarchy.
        assert all(any(tree.glob("*/k8s.io/*")) for tree in trees)
    assert not [tree for tree in trees if tree.exists()]
