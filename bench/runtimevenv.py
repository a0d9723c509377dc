"""The venv our binaries run from in the benchmarks: the wheel and its pinned dependencies, nothing else.

The dev venv (``.venv``) also holds the test and lint tools, and one of them changes what our processes
load: structlog imports ``rich`` when it is installed (import-linter depends on it), 4.3 MiB of RSS in
every process that the image does not have. So the benchmarks run our controller and plugins from a
venv with exactly what the image installs: the wheel built from this tree with
``deployments/container/constraints.txt`` as pip's constraints, as ``tools/image/build.sh`` installs it,
on the Python that runs the benchmark. It is cached under ``<cache>/bench-venv/<stamp>`` (the stamp
hashes the wheel's inputs and the constraints) and built again when they change, replacing the venvs
of earlier trees: about ten seconds, pip's own cache holds the dependencies.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

from imexdra_sim.localcluster.binaries import cache_root

ROOT = Path(__file__).resolve().parents[1]
#: What goes into the wheel (tools/image/build.sh stamps the image with the same list).
WHEEL_INPUTS = ("pyproject.toml", "README.md", "src")
CONSTRAINTS = ROOT / "deployments" / "container" / "constraints.txt"
READY = "bench-venv-ready"


def stamp() -> str:
    """A hash of the wheel's inputs and the constraints (bytecode left out)."""
    files = [CONSTRAINTS]
    for name in WHEEL_INPUTS:
        path = ROOT / name
        files += sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    digest = hashlib.sha256()
    for path in files:
        if "__pycache__" in path.parts or path.suffix == ".pyc":
            continue
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def runtime_venv() -> Path:
    """The venv for this tree, built first if it is not there yet (its progress goes to stderr)."""
    venv = cache_root() / "bench-venv" / stamp()
    if (venv / READY).exists():
        return venv
    shutil.rmtree(venv, ignore_errors=True)  # a build that did not finish
    print(f"building the benchmarks' runtime venv {venv} ...", file=sys.stderr, flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--constraint",
            str(CONSTRAINTS),
            str(ROOT),
        ],
        check=True,
        stdout=sys.stderr,
    )
    (venv / READY).touch()
    for other in venv.parent.iterdir():  # venvs of earlier trees
        if other != venv:
            shutil.rmtree(other, ignore_errors=True)
    return venv
