"""Which upstream commit a side-by-side ran, read off the Go binary that ran (bench/README.md).

``go build`` inside a git checkout stamps the binary with ``vcs.revision`` (the full commit) and
``vcs.modified`` (uncommitted changes in the tree); ``go version -m`` prints them. Reading them from the
binary rather than from the checkout's HEAD names what was measured even when the checkout has moved
on since the build (``bench/upstream.sh`` reuses a cached binary). A binary built from a modified tree
is refused: its figures would belong to no upstream commit.

- ``build_settings``/``binary_commit``: a Go binary's build settings, its full commit;
- ``upstream_binary``: the binary ``bench/upstream.sh build-<program> <checkout>`` gives (building it
  when missing, as its ``run-<program>`` would);
- ``command_upstream_commit``: the commit of a ``--controller-command`` that runs ``bench/upstream.sh
  run-controller <checkout> ...`` or a Go binary directly; ``None`` for any other command.
"""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

from benchlib import ROOT

UPSTREAM_SH = ROOT / "bench" / "upstream.sh"


def build_settings(binary: Path) -> dict[str, str] | None:
    """The ``build`` settings ``go version -m`` shows for ``binary``; None when it is not a Go binary."""
    shown = subprocess.run(["go", "version", "-m", str(binary)], capture_output=True, text=True)
    if shown.returncode != 0:
        return None
    return dict(
        line.split("\t")[2].split("=", 1)
        for line in shown.stdout.splitlines()
        if line.startswith("\tbuild\t") and "=" in line
    )


def binary_commit(binary: Path) -> str:
    """The 40-digit commit ``binary`` was built from; ValueError if it has none or a modified tree."""
    settings = build_settings(binary)
    if settings is None:
        raise ValueError(f"{binary}: not a Go binary with build information")
    revision = settings.get("vcs.revision", "")
    if len(revision) != 40:
        raise ValueError(f"{binary}: built outside a git checkout (no vcs.revision)")
    if settings.get("vcs.modified") != "false":
        raise ValueError(f"{binary}: built from a modified tree at {revision}; rebuild from a clean checkout")
    return revision


def upstream_binary(program: str, checkout: Path) -> Path:
    """``bench/upstream.sh build-<program> <checkout>``'s binary (``program``: controller or plugin)."""
    built = subprocess.run(
        [str(UPSTREAM_SH), f"build-{program}", str(checkout)], capture_output=True, text=True
    )
    if built.returncode != 0:
        raise ValueError(f"bench/upstream.sh build-{program} {checkout} failed: {built.stderr.strip()}")
    return Path(built.stdout.strip().splitlines()[-1])


def command_upstream_commit(command: str | None) -> str | None:
    """The commit a ``--controller-command`` runs when it is upstream's (see the module docstring)."""
    if not command:
        return None
    words = shlex.split(command)
    for index, word in enumerate(words[:-2]):
        if Path(word).name == UPSTREAM_SH.name and words[index + 1].startswith("run-"):
            program = words[index + 1].removeprefix("run-")
            return binary_commit(upstream_binary(program, Path(words[index + 2])))
    executable = Path(words[0])
    if executable.is_file() and build_settings(executable) is not None:
        return binary_commit(executable)
    return None
