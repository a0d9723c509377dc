"""The console scripts exist and answer --help (what packaging promises users)."""

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = [
    "compute-domain-controller",
    "compute-domain-kubelet-plugin",
    "compute-domain-daemon",
    "imexdra",
    "kubectl-imexdra",
]


@pytest.mark.parametrize("script", SCRIPTS)
def test_console_script_help(script: str) -> None:
    """Each installed console script prints its usage line and exits 0."""
    exe = Path(sys.executable).parent / script
    result = subprocess.run([str(exe), "--help"], capture_output=True, text=True, check=False, timeout=30)
    assert result.returncode == 0, result.stderr
    assert f"Usage: {script}" in result.stdout
