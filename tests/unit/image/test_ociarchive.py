"""tools/image/ociarchive.py: relabelling an archive gives what a fresh build with the labels gives."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tarfile
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "tools" / "image" / "ociarchive.py"
REVISION = "org.opencontainers.image.revision"
TITLE = "org.opencontainers.image.title"


@pytest.fixture(scope="module")
def ociarchive() -> ModuleType:
    """The script as a module (it is not part of a package)."""
    spec = importlib.util.spec_from_file_location("ociarchive", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(ociarchive: ModuleType, rootfs: Path, out: Path, revision: str) -> None:
    config = {"Env": ["PATH=/bin"], "Cmd": ["/bin/sh"]}
    ociarchive.write_archive(rootfs, "docker.io/library/x:1", out, config, {TITLE: "x", REVISION: revision})


def test_relabel_equals_a_build_with_the_new_label(ociarchive: ModuleType, tmp_path: Path) -> None:
    """Byte for byte: the build cache may relabel instead of rebuilding without changing the result."""
    rootfs = tmp_path / "rootfs"
    (rootfs / "bin").mkdir(parents=True)
    (rootfs / "bin" / "sh").write_text("#!stand-in\n")
    old, fresh = tmp_path / "old.tar", tmp_path / "fresh.tar"
    build(ociarchive, rootfs, old, "aaaa-dirty")
    build(ociarchive, rootfs, fresh, "bbbb")

    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--relabel", str(old), "--label", f"{REVISION}=bbbb"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout

    assert old.read_bytes() == fresh.read_bytes()
    with tarfile.open(old) as tar:
        index = json.loads(ociarchive._member(tar, "index.json"))
    assert out.split() == [index["manifests"][0]["digest"], str(old)]


def test_relabel_keeps_the_other_labels_and_the_layer(ociarchive: ModuleType, tmp_path: Path) -> None:
    """Only the given label changes; the layer blob is the same bytes."""
    rootfs = tmp_path / "rootfs"
    rootfs.mkdir()
    (rootfs / "file").write_bytes(b"\0" * 4096)
    archive = tmp_path / "a.tar"
    build(ociarchive, rootfs, archive, "aaaa")
    with tarfile.open(archive) as tar:
        layers_before = {m.name: m.size for m in tar.getmembers() if m.size > 4096}
    ociarchive.relabel(archive, {REVISION: "cccc"})
    with tarfile.open(archive) as tar:
        index = json.loads(ociarchive._member(tar, "index.json"))
        manifest = json.loads(ociarchive._member(tar, ociarchive._blob_name(index["manifests"][0]["digest"])))
        config = json.loads(ociarchive._member(tar, ociarchive._blob_name(manifest["config"]["digest"])))
        assert {m.name: m.size for m in tar.getmembers() if m.size > 4096} == layers_before
    assert config["config"]["Labels"] == {TITLE: "x", REVISION: "cccc"}
