"""An earlier commit of this repository, checked out and its image built, for the upgrade test.

``earlier_release(commit)`` makes a detached git worktree of ``commit`` and builds that tree's
image with that tree's own tools/image/build.sh (linux/amd64 only: the nodes are amd64) into a cache
of its own, so the shared cache's archive is never replaced. The debootstrap base is copied into that
cache (its contents, never a link: an older build.sh copies a base as given, and would write through a
link into the shared base), so the build starts from it instead of running debootstrap again.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from imexdra_sim.localcluster.binaries import cache_root
from tests.support.paths import REPO

BASE = "imexdra-base-bookworm"
"""The amd64 debootstrap base tools/image/build.sh keeps in ``<cache>/images`` (with a ``.stamp``)."""


@dataclass(frozen=True, slots=True)
class Checkout:
    """An earlier commit's tree and the image index it built."""

    commit: str
    tree: Path
    archive: Path

    @property
    def chart_dir(self) -> Path:
        """That tree's chart."""
        return self.tree / "deployments" / "helm" / "imexdra"


def resolve(commit: str) -> str:
    """The full commit ID of ``commit`` (a name git understands), or a clear error."""
    result = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--verify", f"{commit}^{{commit}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise ValueError(f"{commit!r} is no commit of {REPO}: {result.stderr.strip()}")
    return result.stdout.strip()


@contextmanager
def earlier_release(commit: str, scratch: Path) -> Iterator[Checkout]:
    """``commit`` checked out under ``scratch`` with its image built; the worktree goes afterwards."""
    full = resolve(commit)
    tree = scratch / "tree"
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), full], check=True)
    try:
        cache = scratch / "cache"
        images = cache / "images"
        images.mkdir(parents=True)
        shared = cache_root() / "images"
        if (shared / BASE).is_dir():
            (images / BASE).mkdir()
            subprocess.run(["cp", "-a", f"{shared / BASE}/.", str(images / BASE)], check=True)
            shutil.copy2(shared / f"{BASE}.stamp", images / f"{BASE}.stamp")
        subprocess.run(
            [str(tree / "tools" / "image" / "build.sh"), "imexdra"],
            env={**os.environ, "IMEXDRA_CACHE": str(cache), "IMEXDRA_IMAGE_PLATFORMS": "linux/amd64"},
            check=True,
        )
        yield Checkout(full, tree, images / "imexdra.tar")
    finally:
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)], check=False)
