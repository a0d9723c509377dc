"""The venv our binaries run from in the benchmarks: the wheel and its pinned dependencies, nothing else.

The dev venv (``.venv``) also holds the test and lint tools, and one of them changes what our processes
load: structlog imports ``rich`` when it is installed (import-linter depends on it), 4.3 MiB of RSS in
every process that the image does not have. So the benchmarks run our controller and plugins from a
venv with exactly what the image installs: the wheel built from this tree with
``deployments/container/constraints.txt`` as pip's constraints, as ``tools/image/build.sh`` installs it,
on the Python that runs the benchmark. It is cached under ``<cache>/bench-venv/<stamp>`` (the stamp
hashes the wheel's inputs and the constraints) and built again when they change, replacing the venvs
of earlier trees: about ten seconds, pip's own cache holds the dependencies. A venv another process is
using is kept: each process holds a shared ``flock`` on its venv's ``in-use.lock`` for its lifetime, and
a venv is removed only under an exclusive one (worktrees of one machine share the cache: on
2026-12-03 one tree's build removed the venv a 256-node bench of another was about to start its
plugins from).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
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
IN_USE = "in-use.lock"
#: The shared locks this process holds on the venvs it uses (open for its lifetime, never inherited).
_HELD: list[int] = []


def _lock(venv: Path, operation: int) -> int | None:
    """``venv``'s in-use lock taken with ``operation``; None when LOCK_NB finds it held."""
    venv.mkdir(parents=True, exist_ok=True)
    fd = os.open(venv / IN_USE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, operation)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


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
    held = _lock(venv, fcntl.LOCK_SH)
    assert held is not None  # a blocking lock
    _HELD.append(held)
    if (venv / READY).exists():
        return venv
    for leftover in venv.iterdir():  # a build that did not finish
        if leftover.is_dir() and not leftover.is_symlink():
            shutil.rmtree(leftover)
        elif leftover.name != IN_USE:
            leftover.unlink()
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
    for other in venv.parent.iterdir():  # venvs of earlier trees, unless a process still uses one
        if other != venv and (fd := _lock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)) is not None:
            shutil.rmtree(other, ignore_errors=True)
            os.close(fd)
    return venv
