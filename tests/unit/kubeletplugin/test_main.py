"""The ``compute-domain-kubelet-plugin`` command line: flags, env, validation, startup failures."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from imexdra.common.process import termination
from imexdra.kubeletplugin.main import main
from imexdra_sim.devices.procfs_fake import write_proc_devices
from tests.unit.api.cli import ALL_GROUPS, env_vars

ISOLATED: dict[str, str | None] = {
    **dict.fromkeys(env_vars(ALL_GROUPS)),
    "ALT_PROC_DEVICES_PATH": None,
}


def run(args: list[str], env: dict[str, str]) -> Result:
    return CliRunner().invoke(main, args, env={**ISOLATED, **env})


def test_help_lists_upstream_flags_and_mock_mode() -> None:
    """Upstream's flag and env names are there, with upstream's mock mode and no simulation-only switch."""
    result = run(["--help"], {})
    assert result.exit_code == 0
    for text in (
        "--node-name",
        "NODE_NAME",
        "--kubelet-registrar-directory-path",
        "--kubelet-plugins-directory-path",
        "--cdi-root",
        "--healthcheck-port",
        "--feature-gates",
        "--imex-mode",
        "ALT_PROC_DEVICES_PATH",
    ):
        assert text in result.output
    assert "FAKE_NVML" not in result.output


def test_node_name_is_required() -> None:
    """Without NODE_NAME the command refuses to run."""
    result = run([], {})
    assert result.exit_code == 2
    assert "--node-name" in result.output


def test_positional_arguments_are_rejected() -> None:
    """Like upstream: no positional arguments."""
    result = run(["extra"], {"NODE_NAME": "node-a"})
    assert result.exit_code == 2


def test_host_managed_mode_needs_the_gate() -> None:
    """--imex-mode=hostManaged without HostManagedIMEX is a usage error."""
    result = run([], {"NODE_NAME": "node-a", "IMEX_MODE": "hostManaged"})
    assert result.exit_code == 2
    assert "HostManagedIMEX" in result.output


def test_channel_isolation_is_refused_before_startup_with_driver_managed_imex() -> None:
    """IMEX_ISOLATION=channel without host-managed IMEX stops the plugin with a usage error: why, and what
    would work."""
    fragments = ["--imex-isolation=channel (IMEX_ISOLATION) needs host-managed IMEX", "HostManagedIMEX=true"]
    result = run([], {"NODE_NAME": "node-a", "FEATURE_GATES": "", "IMEX_ISOLATION": "channel"})
    assert result.exit_code == 2
    output = " ".join(result.output.split())
    for fragment in fragments:
        assert fragment in output


@pytest.mark.parametrize(
    ("gates", "forced"),
    [("HostManagedIMEX=true,", True), ("", False)],
    ids=["host-managed", "driver-managed"],
)
def test_startup_logs_gates_then_fails_without_channel_major(
    tmp_path: Path, gates: str, forced: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Resolved gates are logged first; a node without the IMEX channel major exits 1 before any API call.

    The error is also the container's termination message, where ``kubectl describe pod`` shows it.
    """
    termination_log = tmp_path / "termination-log"
    termination_log.touch()  # the kubelet creates the file in a container
    monkeypatch.setattr(termination, "TERMINATION_LOG", termination_log)
    # The NVML library is only located before the channel major is read, not loaded: any file will do.
    library = tmp_path / "driver-root" / "usr/lib64/libnvidia-ml.so.1"
    library.parent.mkdir(parents=True)
    library.touch()
    env = {
        "NODE_NAME": "node-a",
        "FEATURE_GATES": gates,
        "DRIVER_ROOT_CTR_PATH": str(tmp_path / "driver-root"),
        "ALT_PROC_DEVICES_PATH": str(write_proc_devices(tmp_path / "proc-devices", imex_channels_major=None)),
        "KUBELET_PLUGINS_DIRECTORY_PATH": str(tmp_path / "plugins"),
        "KUBELET_REGISTRAR_DIRECTORY_PATH": str(tmp_path / "registry"),
        "CDI_ROOT": str(tmp_path / "cdi"),
        "LOGGING_FORMAT": "json",
    }
    result = run([], env)
    assert result.exit_code == 1, result.output
    lines = {entry["msg"]: entry for entry in map(json.loads, result.output.splitlines())}
    assert lines["Feature gates"]["featureGates"]["HostManagedIMEX"] is forced
    assert ("Feature gate forced" in lines) == forced
    assert lines["Flags"]["nodeName"] == "node-a"
    assert lines["Flags"]["imexMode"] == ("hostManaged" if forced else "driverManaged")
    assert "nvidia-caps-imex-channels" in lines["Kubelet plugin failed"]["error"]
    message = termination_log.read_text()
    assert message.startswith("kubelet plugin failed: ") and "nvidia-caps-imex-channels" in message
    assert (tmp_path / "cdi").is_dir()
    assert (tmp_path / "plugins" / "compute-domain.nvidia.com").is_dir()
