"""A containerd node's root made from the image seed: what is shared, what is copied, when to rebuild."""

from __future__ import annotations

import os
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from imexdra_sim.localcluster import imagestore
from imexdra_sim.localcluster.binaries import Binaries
from imexdra_sim.localcluster.processes import ClusterStartError

BLOB = Path("io.containerd.content.v1.content/blobs/sha256/ab12")
LAYER_FILE = Path("io.containerd.snapshotter.v1.overlayfs/snapshots/1/fs/usr/bin/python3")
LAYER_LINK = Path("io.containerd.snapshotter.v1.overlayfs/snapshots/1/fs/bin")
META_DB = Path("io.containerd.metadata.v1.bolt/meta.db")
SNAPSHOT_DB = Path("io.containerd.snapshotter.v1.overlayfs/metadata.db")


@pytest.fixture
def seed(tmp_path: Path) -> Path:
    """A root laid out as containerd lays out one after importing an image."""
    root = tmp_path / "seed"
    for path, text in ((BLOB, "layer"), (LAYER_FILE, "elf"), (META_DB, "images"), (SNAPSHOT_DB, "ids")):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    (root / LAYER_LINK).symlink_to("usr/bin")
    (root / LAYER_FILE).chmod(0o755)
    return root


def test_blobs_and_layers_are_links_and_databases_are_copies(seed: Path, tmp_path: Path) -> None:
    """Read-only parts share the seed's inodes; containerd's databases, written in place, do not."""
    root = tmp_path / "node" / "containerd" / "root"
    imagestore.copy_root(seed, root)
    for shared in (BLOB, LAYER_FILE):
        assert (root / shared).stat().st_ino == (seed / shared).stat().st_ino
    assert (root / LAYER_LINK).readlink() == Path("usr/bin")
    assert (root / LAYER_FILE).stat().st_mode & 0o777 == 0o755
    for private in (META_DB, SNAPSHOT_DB):
        assert (root / private).stat().st_ino != (seed / private).stat().st_ino
        (root / private).write_text("written by the node")
        assert (seed / private).read_text() != "written by the node"
    assert sorted(p.name for p in root.rglob(".*")) == []  # no staged copy left behind


def test_private_files_skip_the_shared_trees(seed: Path) -> None:
    """Only files outside SHARED are copied: the databases here."""
    assert sorted(imagestore.private_files(seed)) == sorted([META_DB, SNAPSHOT_DB])


def test_a_root_is_made_once(seed: Path, tmp_path: Path) -> None:
    """An existing root is never overwritten: that would swap a running node's images under it."""
    root = tmp_path / "root"
    root.mkdir()
    with pytest.raises(ClusterStartError, match="exists already"):
        imagestore.copy_root(seed, root)


def test_seed_key_changes_with_an_archive_or_containerd(tmp_path: Path) -> None:
    """A rebuilt archive (size or mtime) or another containerd names another seed."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("containerd", "ctr"):
        (bin_dir / name).write_text(name)
    archive = tmp_path / "imexdra.tar"
    archive.write_text("v1")
    binaries = Binaries(bin_dir)
    first = imagestore.seed_key([archive], binaries)
    assert imagestore.seed_key([archive], binaries) == first
    archive.write_text("v2, longer")
    second = imagestore.seed_key([archive], binaries)
    assert second != first
    os.utime(bin_dir / "containerd", ns=(0, 0))
    assert imagestore.seed_key([archive], binaries) not in (first, second)


def test_prune_keeps_the_current_seed_other_sets_and_the_lock(tmp_path: Path) -> None:
    """Old seeds of the set, dead builds and old-format seeds go; another set's seed and node copies stay."""
    for name in ("set1-old", "set1-new", "set1-old.building", "set2-other", "oldformat"):
        (tmp_path / name).mkdir()
    (tmp_path / ".lock").touch()
    (tmp_path / "set1-old" / "blob").write_text("layer")
    node_copy = tmp_path / "node-blob"
    os.link(tmp_path / "set1-old" / "blob", node_copy)
    imagestore._prune(tmp_path, keep="set1-new")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".lock", "node-blob", "set1-new", "set2-other"]
    assert node_copy.read_text() == "layer"


def test_seed_key_names_the_set_of_archives_first(tmp_path: Path) -> None:
    """A set without the project's image (nodes that pull it) has a set part of its own."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("containerd", "ctr"):
        (bin_dir / name).write_text(name)
    pause, project = tmp_path / "pause.tar", tmp_path / "imexdra.tar"
    pause.write_text("p")
    project.write_text("i")
    with_project = imagestore.seed_key([pause, project], Binaries(bin_dir))
    without = imagestore.seed_key([pause], Binaries(bin_dir))
    assert with_project.split("-")[0] != without.split("-")[0]
    project.write_text("rebuilt")
    assert (
        imagestore.seed_key([pause, project], Binaries(bin_dir)).split("-")[0] == with_project.split("-")[0]
    )


def test_concurrent_nodes_build_one_seed_and_each_get_a_root(
    seed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nodes starting at once find the seed missing together: one builds it, every one copies it."""
    monkeypatch.setenv("IMEXDRA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(imagestore, "seed_key", lambda archives, binaries: "k1")
    builds: list[Path] = []

    def fake_build(target: Path, archives: object, binaries: object) -> None:
        builds.append(target)
        shutil.copytree(seed, target / "root", symlinks=True)

    monkeypatch.setattr(imagestore, "_build_seed", fake_build)
    (tmp_path / "cache" / "containerd-seed" / "stale").mkdir(parents=True)
    roots = [tmp_path / f"node-{i}" / "root" for i in range(4)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        for future in [pool.submit(imagestore.populate_root, r, [], Binaries(tmp_path)) for r in roots]:
            future.result()
    assert builds == [tmp_path / "cache" / "containerd-seed" / "k1"]
    assert all((r / META_DB).read_text() == "images" for r in roots)
    assert sorted(p.name for p in (tmp_path / "cache" / "containerd-seed").iterdir()) == [".lock", "k1"]
