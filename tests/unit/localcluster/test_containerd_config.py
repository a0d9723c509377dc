"""The containerd node's generated configuration and its stop-time cleanup, without a running node."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from imexdra.localcluster import containerd
from imexdra.localcluster.binaries import Binaries
from imexdra.localcluster.nodes import NodeSpec, new_node
from imexdra.localcluster.processes import ClusterStartError

REPO = Path(__file__).resolve().parents[3]


def test_pause_image_is_the_one_the_image_build_makes() -> None:
    """The sandbox image containerd is told to use carries PAUSE_VERSION from tools/k8s/versions.env."""
    versions = dict(
        line.split("=", 1)
        for line in (REPO / "tools/k8s/versions.env").read_text().splitlines()
        if line and not line.startswith("#")
    )
    assert f"registry.k8s.io/pause:{versions['PAUSE_VERSION']}" == containerd.PAUSE_IMAGE


def test_config_keeps_everything_under_the_node_and_enables_cdi(tmp_path: Path) -> None:
    """Root, state and socket in the node's dir; runc from the cache with cgroupfs; CDI in its dirs."""
    config = tomllib.loads(containerd.config_toml(tmp_path, Binaries(Path("/cache/bin"))))
    assert config["version"] == 3
    assert (config["root"], config["state"]) == (str(tmp_path / "root"), str(tmp_path / "state"))
    assert config["grpc"]["address"] == str(tmp_path / "containerd.sock")
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
    sleeper = (
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
        children = _eventually(lambda: containerd._children(mine.pid))
        containerd.kill_shims(tmp_path / "a.sock")
        assert mine.wait(timeout=10) == -9
        assert other.poll() is None
        with pytest.raises(ProcessLookupError):
            _wait_gone(children[0])
    finally:
        other.kill()
        other.wait()


def _eventually(check: Callable[[], list[int]]) -> list[int]:
    deadline = time.monotonic() + 10
    while not (result := check()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
    return result


def _wait_gone(pid: int) -> None:
    """Raise ProcessLookupError once ``pid`` is gone (reaped by init after its parent died)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        os.kill(pid, 0)
        time.sleep(0.05)
