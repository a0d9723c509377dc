"""tools/image/ociarchive.py: image indexes of one or more platforms, and relabelling them.

Covered: relabelling gives what a fresh build with the labels gives (one platform and two); an archive
of two platforms names an image index whose per-platform manifests are byte for byte those of the
one-platform archives (so adding arm64 changes nothing of the amd64 image the local cluster imports);
a platform is OS/ARCH.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.support.scripts import load_script

SCRIPT = Path(__file__).resolve().parents[3] / "tools" / "image" / "ociarchive.py"
REVISION = "org.opencontainers.image.revision"
TITLE = "org.opencontainers.image.title"
INDEX = "application/vnd.oci.image.index.v1+json"


@pytest.fixture(scope="module")
def ociarchive() -> ModuleType:
    """The script as a module (it is not part of a package)."""
    return load_script(SCRIPT)


@pytest.fixture
def roots(tmp_path: Path) -> dict[str, Path]:
    """Two small root filesystems, an amd64 and an arm64 one."""
    found = {}
    for platform, content in [
        ("linux/amd64", "#!x86-64 stand-in\n"),
        ("linux/arm64", "#!aarch64 stand-in\n"),
    ]:
        rootfs = tmp_path / platform.replace("/", "-")
        (rootfs / "bin").mkdir(parents=True)
        (rootfs / "bin" / "sh").write_text(content)
        found[platform] = rootfs
    return found


def build(ociarchive: ModuleType, roots: dict[str, Path], out: Path, revision: str) -> str:
    config = {"Env": ["PATH=/bin"], "Cmd": ["/bin/sh"]}
    digest: str = ociarchive.write_archive(
        roots, "docker.io/library/x:1", out, config, {TITLE: "x", REVISION: revision}
    )
    return digest


def read(archive: Path, name: str) -> Any:
    """A JSON member of an archive: ``index.json`` or a blob's digest."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile(name if name == "index.json" else "blobs/" + name.replace(":", "/", 1))
        assert member is not None
        return json.load(member)


@pytest.mark.parametrize("platforms", [["linux/amd64"], ["linux/amd64", "linux/arm64"]], ids=["one", "two"])
def test_relabel_equals_a_build_with_the_new_label(
    ociarchive: ModuleType, roots: dict[str, Path], tmp_path: Path, platforms: list[str]
) -> None:
    """Byte for byte: the build cache may relabel instead of rebuilding without changing the result."""
    chosen = {platform: roots[platform] for platform in platforms}
    old, fresh = tmp_path / "old.tar", tmp_path / "fresh.tar"
    build(ociarchive, chosen, old, "aaaa-dirty")
    build(ociarchive, chosen, fresh, "bbbb")

    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--relabel", str(old), "--label", f"{REVISION}=bbbb"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout

    assert old.read_bytes() == fresh.read_bytes()
    assert out.split() == [read(old, "index.json")["manifests"][0]["digest"], str(old)]


def test_relabel_keeps_the_other_labels_and_the_layer(ociarchive: ModuleType, tmp_path: Path) -> None:
    """Only the given label changes; the layer blob is the same bytes."""
    rootfs = tmp_path / "rootfs"
    rootfs.mkdir()
    (rootfs / "file").write_bytes(b"\0" * 4096)
    archive = tmp_path / "a.tar"
    build(ociarchive, {"linux/amd64": rootfs}, archive, "aaaa")
    with tarfile.open(archive) as tar:
        layers_before = {m.name: m.size for m in tar.getmembers() if m.size > 4096}
    ociarchive.relabel(archive, {REVISION: "cccc"})
    with tarfile.open(archive) as tar:
        assert {m.name: m.size for m in tar.getmembers() if m.size > 4096} == layers_before
    manifest = read(archive, read(archive, "index.json")["manifests"][0]["digest"])
    assert read(archive, manifest["config"]["digest"])["config"]["Labels"] == {TITLE: "x", REVISION: "cccc"}


def test_two_platforms_hold_the_one_platform_manifests(
    ociarchive: ModuleType, roots: dict[str, Path], tmp_path: Path
) -> None:
    """index.json names an image index listing each platform's manifest, as its own archive has it."""
    both = tmp_path / "both.tar"
    build(ociarchive, roots, both, "aaaa")
    [top] = read(both, "index.json")["manifests"]
    assert top["mediaType"] == INDEX
    assert top["annotations"]["io.containerd.image.name"] == "docker.io/library/x:1"
    listed = read(both, top["digest"])["manifests"]
    assert [entry["platform"] for entry in listed] == [
        {"architecture": "amd64", "os": "linux"},
        {"architecture": "arm64", "os": "linux"},
    ]
    for entry, (platform, rootfs) in zip(listed, roots.items(), strict=True):
        alone = tmp_path / f"{rootfs.name}.tar"
        assert build(ociarchive, {platform: rootfs}, alone, "aaaa") == entry["digest"]
        config = read(both, read(both, entry["digest"])["config"]["digest"])
        assert (config["os"], config["architecture"]) == tuple(platform.split("/"))


@pytest.mark.parametrize("platform", ["arm64", "linux/", "linux/arm64/v8/x"])
def test_a_platform_is_os_and_architecture(ociarchive: ModuleType, platform: str) -> None:
    """Anything but OS/ARCH is refused with a message naming it."""
    with pytest.raises(ValueError, match="OS/ARCH"):
        ociarchive._platform(platform)
