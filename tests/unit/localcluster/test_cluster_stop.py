"""``LocalCluster.stop``: a containerd node's containers go with their node, before the control plane."""

from __future__ import annotations

from pathlib import Path

import pytest

from imexdra_sim.localcluster import cluster
from imexdra_sim.localcluster.binaries import Binaries
from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.localcluster.nodes import NodeSpec, new_node


def test_node_containers_are_killed_while_the_apiserver_still_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The apiserver waits for pods' watches on SIGTERM: their shims must be gone before it stops."""
    local = LocalCluster(run_dir=tmp_path, binaries=Binaries(tmp_path / "bin"))
    supervisor = local._supervisor
    apiserver = supervisor.start("kube-apiserver", ["sleep", "60"])
    node = new_node(NodeSpec(name="cd-0", runtime="containerd"), tmp_path)
    node.processes = [supervisor.start("cd-0-containerd", ["sleep", "60"])]
    node.processes.append(supervisor.start("cd-0-kubelet", ["sleep", "60"]))
    local.nodes.append(node)
    seen: list[tuple[Path, bool, bool]] = []
    monkeypatch.setattr(
        cluster,
        "kill_shims",
        lambda socket: seen.append((socket, any(p.alive() for p in node.processes), apiserver.alive())),
    )

    local.stop()

    # The node's kubelet and containerd were stopped first, the apiserver was still up.
    assert seen == [(node.cri_socket, False, True)]
    assert not apiserver.alive() and supervisor.processes == []
