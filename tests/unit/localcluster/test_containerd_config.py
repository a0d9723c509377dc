"""The containerd node's generated configuration and its stop-time cleanup, without a running node."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from imexdra_sim.localcluster import containerd, processes
from imexdra_sim.localcluster.binaries import Binaries
from imexdra_sim.localcluster.fabric import Fabric
from imexdra_sim.localcluster.nodes import NodeSpec, new_node, start_node
from imexdra_sim.localcluster.processes import ClusterStartError, Supervisor
from imexdra_sim.localcluster.registry import Registry, hosts_toml
from tests.support.paths import REPO
from tests.support.waiting import wait_until


def test_pause_image_is_the_one_the_image_build_makes() -> None:
    """The sandbox image containerd is told to use carries PAUSE_VERSION from tools/k8s/versions.env."""
    versions = dict(
        line.split("=", 1)
        for line in (REPO / "tools/k8s/versions.env").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert f"registry.k8s.io/pause:{versions['PAUSE_VERSION']}" == containerd.PAUSE_IMAGE


def test_config_keeps_everything_under_the_node_and_enables_cdi(tmp_path: Path) -> None:
    """Root, state, socket and NRI socket in the node's dir; runc from the cache, cgroupfs; CDI on."""
    config = tomllib.loads(containerd.config_toml(tmp_path, Binaries(Path("/cache/bin"))))
    assert config["version"] == 3
    assert (config["root"], config["state"]) == (str(tmp_path / "root"), str(tmp_path / "state"))
    assert config["grpc"]["address"] == str(tmp_path / "containerd.sock")
    # Not the host-wide default: nodes starting together raced for it and one containerd exited.
    assert config["plugins"]["io.containerd.nri.v1.nri"]["socket_path"] == str(tmp_path / "nri.sock")
    runtime = config["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["enable_cdi"] is True
    assert runtime["cdi_spec_dirs"] == ["/etc/cdi", "/var/run/cdi"]
    assert runtime["restrict_oom_score_adj"] is True
    runc = runtime["containerd"]["runtimes"]["runc"]
    assert runc["runtime_type"] == "io.containerd.runc.v2"
    assert runc["options"] == {"BinaryName": "/cache/bin/runc", "SystemdCgroup": False}
    assert runtime["cni"] == {"bin_dirs": ["/cache/bin"], "conf_dir": str(tmp_path / "net.d")}
    images = config["plugins"]["io.containerd.cri.v1.images"]
    assert images["pinned_images"]["sandbox"] == containerd.PAUSE_IMAGE
    assert images["registry"] == {"config_path": str(tmp_path / "certs.d")}  # hosts.toml per registry


def test_hosts_toml_pulls_from_the_registry_over_tls_with_its_ca(tmp_path: Path) -> None:
    """The registry as an operator configures a private one: its server, pull and resolve, the CA."""
    registry = Registry(host="10.201.0.1:5000", ca=tmp_path / "ca.crt", process=None)  # type: ignore[arg-type]
    hosts = tomllib.loads(hosts_toml(registry))
    assert hosts["server"] == "https://10.201.0.1:5000"
    assert hosts["host"]["https://10.201.0.1:5000"] == {
        "capabilities": ["pull", "resolve"],
        "ca": str(tmp_path / "ca.crt"),
    }


def test_nodes_pulling_from_a_registry_leave_the_projects_image_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a registry the node's seed has every archive but the project's, which it pulls."""
    monkeypatch.setattr(containerd, "images_dir", lambda: tmp_path)
    for name in ("pause.tar", "coredns.tar", "imexdra.tar", "ubuntu.tar"):
        (tmp_path / name).write_text(name)
    assert [a.name for a in containerd.image_archives()] == [
        "coredns.tar",
        "imexdra.tar",
        "pause.tar",
        "ubuntu.tar",
    ]
    assert [a.name for a in containerd.image_archives(pulled=True)] == [
        "coredns.tar",
        "pause.tar",
        "ubuntu.tar",
    ]


def test_cni_bridge_covers_the_pod_cidr_with_ipam_state_per_node(tmp_path: Path) -> None:
    """One bridge plugin, host-local over the node's CIDR, its state in the given directory."""
    [bridge] = containerd.cni_conflist("10.244.3.0/24", tmp_path / "ipam")["plugins"]  # type: ignore[misc]
    assert bridge["type"] == "bridge" and bridge["isGateway"] is True
    assert bridge["ipam"]["dataDir"] == str(tmp_path / "ipam")
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.244.3.0/24"}]]


def test_loopback_pod_cidr_is_refused_with_what_works(tmp_path: Path) -> None:
    """fakecri's loopback ranges cannot carry a bridge: the error names the CIDR and says routable."""
    with pytest.raises(ClusterStartError, match=r"routable pod CIDR, not loopback 127\.100\.1\.0/24"):
        containerd.cni_conflist("127.100.1.0/24", tmp_path)


def test_kubelet_of_a_containerd_node_talks_to_its_containerd(tmp_path: Path) -> None:
    """The kubelet's runtime endpoint is the node's containerd socket."""
    node = new_node(NodeSpec(name="n1", runtime="containerd"), tmp_path)
    expected = tmp_path / "n1" / "containerd" / "containerd.sock"
    assert node.kubelet_config("192.0.2.2")["containerRuntimeEndpoint"] == f"unix://{expected}"


def test_kill_shims_ends_only_the_shims_of_that_socket_and_their_children(tmp_path: Path) -> None:
    """A process named like a shim of the socket dies with its child; one of another socket lives."""
    sleeper = (  # a shim and its container init, living until killed
        "import subprocess, time; "
        f"subprocess.Popen([{sys.executable!r}, '-c', 'import time; time.sleep(60)']); time.sleep(60)"
    )

    def fake_shim(socket: Path) -> subprocess.Popen[bytes]:
        # argv[0] names the shim, as containerd starts it; the child stands for a container init.
        return subprocess.Popen(
            ["containerd-shim-runc-v2", "-c", sleeper, "-namespace", "k8s.io", "-address", str(socket)],
            executable=sys.executable,
        )

    mine, other = fake_shim(tmp_path / "a.sock"), fake_shim(tmp_path / "b.sock")
    try:
        children = wait_until("the children", lambda: processes.children(mine.pid), timeout=10, interval=0.05)
        containerd.kill_shims(tmp_path / "a.sock")
        assert mine.wait(timeout=10) == -9
        assert other.poll() is None
        wait_until("the shim's child gone", lambda: not _exists(children[0]), timeout=10, interval=0.05)
    finally:
        other.kill()
        other.wait()


def _exists(pid: int) -> bool:
    """Tell whether ``pid`` exists (a zombie does until init reaps it after its parent died)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_fabric_addresses_keep_nodes_pods_and_the_machine_apart() -> None:
    """Fabric k: the machine at .0.1, node i at .0.(i+2), its pods in .(i+1).0/24, all in 10.(200+k)/16."""
    fabric = Fabric(index=3, switch=None)  # type: ignore[arg-type]  # addresses need no switch
    assert (fabric.host_ip, fabric.host_link, fabric.cluster_cidr) == ("10.203.0.1", "imx3h", "10.203.0.0/16")
    assert [fabric.node_ip(i) for i in range(3)] == ["10.203.0.2", "10.203.0.3", "10.203.0.4"]
    assert [fabric.pod_cidr(i) for i in range(2)] == ["10.203.1.0/24", "10.203.2.0/24"]
    assert fabric.contains(fabric.pod_cidr(1).split("/")[0]) and not fabric.contains("10.204.0.1")


def test_containerd_node_refuses_a_pod_cidr_of_its_own(tmp_path: Path) -> None:
    """The fabric owns containerd nodes' pod CIDRs: a NodeSpec that sets one is told to leave it empty."""
    node = new_node(NodeSpec(name="n1", runtime="containerd", pod_cidr="10.244.1.0/24"), tmp_path)
    with pytest.raises(ClusterStartError, match=r"leave NodeSpec\.pod_cidr empty"):
        start_node(
            node,
            binaries=Binaries(tmp_path),
            supervisor=Supervisor(tmp_path / "logs"),
            kubeconfig=tmp_path / "kubeconfig",
            node_ip="10.203.0.2",
            host_images={},
            host_path_map={},
            cdi_dirs=[],
            apiserver_port=6443,
            network=None,
        )
