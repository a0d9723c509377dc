"""The compute-domain-daemon command line: flags and env, check verdicts, run's precondition, IMEX files."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from imexdra.api.featuregates import resolve_feature_gates
from imexdra.api.flags.common import KubeClientSettings
from imexdra.api.flags.daemon import DaemonSettings
from imexdra.daemon.options import DaemonFiles
from imexdra.daemon.run import RunConfig, prepare_imexd
from imexdra.devices.imex import parse_config
from imexdra_sim.devices.fakeimex.install import install_fake_imex

DAEMON = str(Path(sys.executable).parent / "compute-domain-daemon")


def daemon_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "CLIQUE_ID", "FEATURE_GATES")}
    return subprocess.run(
        [DAEMON, *args], capture_output=True, text=True, timeout=60, check=False, env={**base, **env}
    )


def test_help_names_upstream_variables() -> None:
    """Every upstream flag shows its environment variable, plus the file options."""
    out = daemon_cli("--help", env={}).stdout
    for name in (
        "CLIQUE_ID",
        "COMPUTE_DOMAIN_UUID",
        "COMPUTE_DOMAIN_NAME",
        "POD_IP",
        "POD_NAMESPACE",
        "MAX_NODES_PER_IMEX_DOMAIN",
        "FEATURE_GATES",
        "NODE_NAME",
        "IMEXD_DIR",
        "IMEXD_HOSTS_FILE",
    ):
        assert name in out
    assert "run" in out and "check" in out


def test_check_without_clique_is_a_noop() -> None:
    """``check`` on a node without a fabric passes and says so."""
    result = daemon_cli("check", env={"NODE_NAME": "node-a", "CLIQUE_ID": ""})
    assert result.returncode == 0
    assert "check succeeded (noop, clique ID is empty)" in result.stdout


def test_check_asks_the_running_imex(tmp_path: Path, short_dir: Path) -> None:
    """``check`` fails while no IMEX answers and passes once the (fake) daemon reports READY."""
    binaries = install_fake_imex(tmp_path / "bin")
    imexd = tmp_path / "imexd"
    imexd.mkdir()
    address = "127.203.7.1"
    (imexd / "nodes.cfg").write_text(f"{address}\n")
    config = (
        f"SERVER_PORT=0\nIMEX_NODE_CONFIG_FILE={imexd / 'nodes.cfg'}\nIMEX_CMD_ENABLED=1\n"
        f"IMEX_CMD_BIND_INTERFACE_IP={address}\nIMEX_CMD_PORT=0\n"
        f"IMEX_CMD_UNIX_DOMAIN_PATH={short_dir / 'cmd.sock'}\n"
    )
    (imexd / "imexd.cfg").write_text(config)
    env = {
        "NODE_NAME": "node-a",
        "CLIQUE_ID": "u.1",
        "IMEXD_DIR": str(imexd),
        "PATH": f"{binaries.directory}:/usr/bin:/bin",
    }
    failed = daemon_cli("check", env=env)
    assert failed.returncode == 1 and "IMEX daemon not ready" in failed.stderr
    imex = subprocess.Popen([str(binaries.imex), "-c", str(imexd / "imexd.cfg")], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while (result := daemon_cli("check", env=env)).returncode != 0:
            assert time.monotonic() < deadline, result.stderr
            time.sleep(0.2)
    finally:
        imex.terminate()
        imex.wait(timeout=10)


def test_run_requires_cdi_identity() -> None:
    """Without COMPUTE_DOMAIN_UUID, ``run`` fails with upstream's CDI message and exit code 1."""
    result = daemon_cli("run", env={"NODE_NAME": "node-a", "COMPUTE_DOMAIN_UUID": ""})
    assert result.returncode == 1
    assert "CDI container edits did not apply" in result.stderr


@pytest.mark.skipif(
    Path("/usr/bin/nvidia-imex").exists(), reason="this host has an NVIDIA driver's nvidia-imex in /usr/bin"
)
def test_run_without_the_drivers_imex_fails_naming_what_is_missing(tmp_path: Path) -> None:
    """With a clique but no nvidia-imex in the container, ``run`` exits 1 before any API call, saying why."""
    env = {
        "NODE_NAME": "node-a",
        "CLIQUE_ID": "u.1",
        "COMPUTE_DOMAIN_UUID": "cd-uid",
        "COMPUTE_DOMAIN_NAME": "cd",
        "POD_NAME": "pod",
        "POD_NAMESPACE": "driver",
        "POD_IP": "10.0.0.7",
        "PATH": str(tmp_path),  # nothing there: the image does not ship IMEX
    }
    result = daemon_cli("run", env=env)
    assert result.returncode == 1
    assert "nvidia-imex and nvidia-imex-ctl not found in this container" in result.stdout + result.stderr
    assert "driver root" in result.stdout + result.stderr


def config(tmp_path: Path, gates: str) -> RunConfig:
    daemon = DaemonSettings(
        clique_id="u.1",
        compute_domain_uuid="cd-uid",
        compute_domain_name="cd",
        compute_domain_namespace="default",
        pod_ip="10.0.0.7",
        pod_uid="pod-uid",
        pod_name="pod",
        pod_namespace="driver",
        max_nodes_per_imex_domain=4,
    )
    files = DaemonFiles(imexd_dir=tmp_path / "imexd", hosts_file=tmp_path / "hosts")
    return RunConfig(daemon, "node-a", resolve_feature_gates(gates), files, KubeClientSettings(None, 5.0, 10))


@pytest.mark.parametrize(
    ("gates", "static_nodes"),
    [("", True), ("IMEXDaemonsWithDNSNames=false,ComputeDomainCliques=false", False)],
    ids=["dns-names", "ip-mode"],
)
def test_prepare_writes_config_and_dns_node_list(tmp_path: Path, gates: str, static_nodes: bool) -> None:
    """imexd.cfg binds the command service to the pod IP; only DNS-names mode pre-writes nodes.cfg."""
    run = config(tmp_path, gates)
    prepare_imexd(run)
    rendered = parse_config((tmp_path / "imexd" / "imexd.cfg").read_text())
    assert rendered["IMEX_CMD_BIND_INTERFACE_IP"] == "10.0.0.7"
    assert rendered["IMEX_NODE_CONFIG_FILE"] == str(tmp_path / "imexd" / "nodes.cfg")
    nodes = tmp_path / "imexd" / "nodes.cfg"
    assert nodes.exists() is static_nodes
    if static_nodes:
        # 092824bb: the first 8 hex digits of SHA-256 of the domain UID "cd-uid".
        assert nodes.read_text().split() == [f"compute-domain-daemon-092824bb-000{i}" for i in range(4)]


def test_prepare_uses_the_provided_template(tmp_path: Path) -> None:
    """A template placed by the kubelet plugin wins over the built-in one."""
    (tmp_path / "imexd").mkdir()
    (tmp_path / "imexd" / "imexd.cfg.tmpl").write_text(
        "CUSTOM=1\nIMEX_CMD_BIND_INTERFACE_IP={{ .IMEXCmdBindInterfaceIP }}\n"
    )
    prepare_imexd(config(tmp_path, ""))
    assert (tmp_path / "imexd" / "imexd.cfg").read_text() == "CUSTOM=1\nIMEX_CMD_BIND_INTERFACE_IP=10.0.0.7\n"


def test_validate_needs_the_compute_domain_name_without_cliques(tmp_path: Path) -> None:
    """With ComputeDomainCliques off the daemon watches the ComputeDomain, so it must know its name."""
    run = config(tmp_path, "ComputeDomainCliques=false")
    run.validate()
    bare = RunConfig(
        DaemonSettings(
            **{**{f: getattr(run.daemon, f) for f in run.daemon.__slots__}, "compute_domain_name": ""}
        ),
        run.node_name,
        run.feature_gates,
        run.files,
        run.kube_client,
    )
    with pytest.raises(Exception, match="compute_domain_name"):
        bare.validate()
