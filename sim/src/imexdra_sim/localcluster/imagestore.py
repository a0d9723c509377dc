"""Every image imported once into a *seed* containerd root, which each containerd node's root copies.

Images cannot be pulled here: a node's containerd must hold tools/image/build.sh's archives in its
``k8s.io`` namespace before its kubelet starts. Importing is the slow part of a node's start: ctr
verifies every blob and unpacks every layer into a snapshot, 8 s for the five archives (the project's
image is 190 MB of small files), and running the nodes' imports at once does not help on 2 cores (a
control plane and two workers took 31 s so, 26 s one after the other). So the archives are imported
once, into a seed root in the cache that lives until an archive or containerd changes, and a node's
root starts as a copy of it in which the big, never rewritten parts are hard links:

* content blobs (``io.containerd.content.v1.content/blobs``): containerd writes a blob once, under a
  temporary name, and removes one by unlinking it, which leaves the seed's link alone;
* the image layers' snapshots (``io.containerd.snapshotter.v1.overlayfs/snapshots``): a committed
  snapshot is only ever an overlay lower dir; a container writes to an upper dir of its own (a new
  snapshot), and overlayfs copies a file up before changing it.

Everything else, the bolt databases first (containerd writes them in place), is copied. Each node
thus has the very images an import gave it, as a real node restarted on its disk has (containerd's
CRI lists them when it starts), in about 0.2 s.

Seeds live in ``<cache>/containerd-seed/<key>``, the key naming the set of archives, then their
contents (name, size, mtime) and the containerd that wrote them. A lock file serializes building and
pruning (exclusive) against nodes copying a seed (shared), across processes: other engineers' test
runs share the cache.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from imexdra_sim.localcluster.binaries import Binaries, cache_root
from imexdra_sim.localcluster.processes import ClusterStartError, Supervisor, wait_until

SEED_FORMAT = 1
"""Bump when the seed's layout or the way it is built changes: old seeds are then rebuilt."""
SHARED = (
    Path("io.containerd.content.v1.content/blobs"),
    Path("io.containerd.snapshotter.v1.overlayfs/snapshots"),
)
"""Parts of a containerd root that nodes share as hard links (see the module docstring)."""
NAMESPACE = "k8s.io"
"""The containerd namespace of the CRI: where the kubelet finds images."""


def seeds_dir() -> Path:
    """Where seeds are kept, beside the image archives and binaries."""
    return cache_root() / "containerd-seed"


def seed_key(archives: Sequence[Path], binaries: Binaries) -> str:
    """Name the seed the archives and this containerd make: a rebuilt archive or binary changes it.

    ``<set>-<contents>``: ``<set>`` names which archives (a cluster whose nodes pull the project's
    image from its registry seeds without it, ``localcluster.registry``), so the seeds of two sets
    live side by side and only an outdated seed of the same set is pruned.
    """
    names = hashlib.sha256(" ".join(sorted(a.name for a in archives)).encode()).hexdigest()[:8]
    digest = hashlib.sha256(f"seed-format {SEED_FORMAT}\n".encode())
    for path in (binaries.path("containerd"), binaries.path("ctr"), *archives):
        stat = path.stat()
        digest.update(f"{path.name} {stat.st_size} {stat.st_mtime_ns}\n".encode())
    return f"{names}-{digest.hexdigest()[:16]}"


def populate_root(root: Path, archives: Sequence[Path], binaries: Binaries) -> None:
    """Make ``root`` (absent) a containerd root holding ``archives``' images, from their seed.

    The seed is built first if this set of archives has none yet (about 8 s, once per image build).
    """
    seeds = seeds_dir()
    seeds.mkdir(parents=True, exist_ok=True)
    key = seed_key(archives, binaries)
    seed = seeds / key
    with _locked(seeds / ".lock") as lock:
        if not seed.is_dir():
            # flock converts shared to exclusive by dropping the shared lock first, so two nodes that
            # both find the seed missing cannot deadlock; the second finds it built and builds nothing.
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not seed.is_dir():
                _build_seed(seed, archives, binaries)
                _prune(seeds, keep=key)
            fcntl.flock(lock, fcntl.LOCK_SH)
        copy_root(seed / "root", root)


def copy_root(seed: Path, root: Path) -> None:
    """Copy containerd root ``seed`` to ``root`` (absent): ``SHARED`` parts as hard links, the rest copied."""
    if root.exists():
        raise ClusterStartError(f"{root} exists already: a node's containerd root is made from a seed once")
    root.parent.mkdir(parents=True, exist_ok=True)
    # cp -a keeps owners, modes and extended attributes (overlayfs keeps its opaque-dir marks in them);
    # --link makes every file a hard link. Those outside SHARED are then replaced by copies.
    _checked(["cp", "-a", "--link", "--", str(seed), str(root)])
    for path in private_files(seed):
        target = root / path
        staged = target.with_name(f".{target.name}.copy")
        shutil.copy2(seed / path, staged)
        staged.replace(target)


def private_files(seed: Path) -> Iterator[Path]:
    """Every regular file of ``seed`` outside ``SHARED``, relative to it: what each node copies."""
    for directory, subdirs, files in os.walk(seed):
        relative = Path(directory).relative_to(seed)
        subdirs[:] = [d for d in subdirs if relative / d not in SHARED]
        for name in files:
            if (Path(directory) / name).is_file() and not (Path(directory) / name).is_symlink():
                yield relative / name


def _build_seed(seed: Path, archives: Sequence[Path], binaries: Binaries) -> None:
    """Import ``archives`` with a containerd of its own into ``<seed>/root``, then stop it."""
    building = seed.with_name(f"{seed.name}.building")
    shutil.rmtree(building, ignore_errors=True)  # a build that died; we hold the exclusive lock
    # Socket and state in a short /tmp path: unix socket paths are limited to 107 bytes.
    with tempfile.TemporaryDirectory(prefix="imx-seed-", dir="/tmp") as scratch:
        config = Path(scratch) / "config.toml"
        socket = Path(scratch) / "containerd.sock"
        config.write_text(_seed_config(building / "root", Path(scratch) / "state", socket))
        supervisor = Supervisor(Path(scratch) / "logs")
        # A mount namespace of its own: unpacking mounts each snapshot for a moment; none reaches the
        # machine's mount table, even if this containerd dies half-way.
        process = supervisor.start(
            "seed-containerd",
            [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "--",
                str(binaries.path("containerd")),
                f"--config={config}",
            ],
        )
        try:
            wait_until("seed containerd socket", socket.exists, timeout=30, process=process)
            ctr = [str(binaries.path("ctr")), f"--address={socket}", "-n", NAMESPACE]
            for archive in archives:
                result = subprocess.run(
                    [*ctr, "images", "import", str(archive)], capture_output=True, text=True, check=False
                )
                if result.returncode != 0:
                    raise ClusterStartError(f"importing {archive} failed: {result.stderr.strip()}")
        finally:
            # SIGTERM: containerd closes its databases before it exits, so the copies are whole.
            supervisor.stop_all()
        if process.popen.returncode not in (0, -15):
            raise ClusterStartError(
                f"the seed's containerd exited with {process.popen.returncode}; see {process.log_path}"
            )
    building.rename(seed)


def _seed_config(root: Path, state: Path, socket: Path) -> str:
    """Containerd config for building a seed: the nodes' snapshotter, no CRI (nothing runs here)."""
    return f"""version = 3
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime"]

[grpc]
  address = "{socket}"
"""


def _prune(seeds: Path, *, keep: str) -> None:
    """Remove every other seed of ``keep``'s set of archives, and seeds named in an older format.

    Node roots made from a removed seed keep their files (hard links).
    """
    archive_set = keep.split("-")[0]
    for entry in seeds.iterdir():
        outdated = entry.name.split("-")[0] == archive_set or "-" not in entry.name.removesuffix(".building")
        if entry.name not in (keep, ".lock") and outdated:
            shutil.rmtree(entry, ignore_errors=True)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[int]:
    """Hold ``path``'s flock shared; yield the descriptor, for converting it to exclusive."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        yield fd
    finally:
        os.close(fd)


def _checked(argv: list[str]) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ClusterStartError(f"{' '.join(argv)} failed: {result.stderr.strip()}")
