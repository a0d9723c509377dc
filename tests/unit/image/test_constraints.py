"""deployments/container/constraints.txt pins the image venv to the versions the tests run on.

Both image recipes install the wheel with ``--constraint``; tools/venv.sh installs the development
venv with the same file. tools/image/constraints.py computes the closure of pyproject.toml's runtime
dependencies from what is installed here; the file must be exactly that.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib

from tests.support.paths import REPO

CONSTRAINTS = REPO / "deployments/container/constraints.txt"
SCRIPT = REPO / "tools/image/constraints.py"


def _pins() -> dict[str, str]:
    lines = [line for line in CONSTRAINTS.read_text().splitlines() if line and not line.startswith("#")]
    return dict(line.split("==", 1) for line in lines)


def test_constraints_are_the_closure_installed_here() -> None:
    """The file equals what the script computes from this venv (a stale file fails with the fix)."""
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr


def test_direct_dependencies_are_pinned_at_pyprojects_versions() -> None:
    """Every ``[project] dependencies`` pin appears unchanged; nothing from the test or lint extras does."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    pins = _pins()
    for requirement in project["dependencies"]:
        name, _, version = requirement.partition("==")
        assert pins.get(name.lower()) == version, requirement
    for extra in ("test", "lint"):
        for requirement in project["optional-dependencies"][extra]:
            assert requirement.partition("==")[0].lower() not in pins, requirement


def test_both_recipes_and_the_dev_venv_install_with_the_constraints() -> None:
    """The Dockerfile, tools/image/build.sh and tools/venv.sh all pass the file to pip."""
    assert (
        "--constraint /src/constraints.txt /wheels/imexdra-*.whl"
        in (REPO / "deployments/container/Dockerfile").read_text()
    )
    assert (
        "--constraint /src/constraints.txt /wheels/imexdra-*.whl"
        in (REPO / "tools/image/build.sh").read_text()
    )
    assert "deployments/container/constraints.txt" in (REPO / "tools/venv.sh").read_text()
