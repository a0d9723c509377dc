"""The wheel, as the image builds and installs it: its working console scripts in a fresh venv.

Mirrors the Dockerfile's build stage (``pip wheel --no-deps .``, then ``pip install`` of the wheel
with its pinned dependencies from PyPI) outside a container engine. Needs network access to PyPI and
about a minute; it needs no cluster. A fresh venv catches what the development venv hides: a runtime
import of a test-only package, a file missing from the wheel, a broken entry point.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

from tests.support.paths import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
SCRIPTS = sorted(PYPROJECT["project"]["scripts"])


def run(*args: str | Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run a command; fail the test with its output if it fails."""
    result = subprocess.run(
        [str(a) for a in args], capture_output=True, text=True, timeout=timeout, check=False
    )
    assert result.returncode == 0, f"{args} failed:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel, built as the Dockerfile builds it."""
    out = tmp_path_factory.mktemp("wheel")
    run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--quiet",
        "--disable-pip-version-check",
        "--no-deps",
        "-w",
        out,
        REPO,
    )
    (built,) = out.glob("imexdra-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with only the wheel and its runtime dependencies; returns its bin directory."""
    root = tmp_path_factory.mktemp("venv")
    venv.create(root, with_pip=True)
    bin_dir = root / "bin"
    run(bin_dir / "python", "-m", "pip", "install", "--quiet", "--disable-pip-version-check", wheel)
    return bin_dir


def test_wheel_holds_the_package_and_its_entry_points(wheel: Path) -> None:
    """The wheel has every module (stubs and py.typed too), no tests, and the console scripts."""
    version = PYPROJECT["project"]["version"]
    assert wheel.name == f"imexdra-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = archive.read(f"imexdra-{version}.dist-info/entry_points.txt").decode()
        metadata = archive.read(f"imexdra-{version}.dist-info/METADATA").decode()
    expected = {
        p.relative_to(REPO / "src").as_posix()
        for p in (REPO / "src/imexdra").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert expected <= names
    assert not [n for n in names if n.startswith("tests/")]
    # The test and demo equipment is imexdra-sim's (sim/), never the driver's (docs/architecture.md §2.3).
    harness = ("imexdra_sim", "localcluster", "_fake.py", "fakeimex", "cli/rack.py", "cli/demo.py")
    assert not [n for n in names if any(part in n for part in harness)]
    for script, target in PYPROJECT["project"]["scripts"].items():
        assert f"{script} = {target}" in entry_points
    for requirement in PYPROJECT["project"]["dependencies"]:
        assert f"Requires-Dist: {requirement}" in metadata


def test_dependencies_are_only_the_runtime_ones(installed: Path) -> None:
    """The fresh venv has no test or lint extras (so a stray import of them would show below)."""
    listed = run(installed / "python", "-m", "pip", "list", "--format=freeze").stdout.lower()
    for extra in ("pytest", "cryptography", "jsonschema", "mypy", "ruff"):
        assert f"{extra}==" not in listed


@pytest.mark.parametrize("script", SCRIPTS)
def test_console_script_answers_help(installed: Path, script: str) -> None:
    """Each console script of the installed wheel prints its usage and exits 0."""
    result = run(installed / script, "--help", timeout=120)
    assert f"Usage: {script}" in result.stdout


def test_installed_driver_has_no_demo(installed: Path) -> None:
    """Without imexdra-sim, as in the image, ``imexdra`` offers only its own commands."""
    result = run(installed / "imexdra", "--help", timeout=120)
    commands = result.stdout.partition("Commands:")[2].split()
    assert "status" in commands
    assert "demo" not in commands
