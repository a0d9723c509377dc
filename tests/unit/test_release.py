"""tools/release.py (``make release``): what it refuses before pushing anything, and the chart it packages."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
import yaml

from tests.support.paths import TOOLS
from tests.support.scripts import load_script

DIGEST = "sha256:" + "ab" * 32


@pytest.fixture(scope="module")
def release() -> ModuleType:
    """The script as a module."""
    return load_script(TOOLS / "release.py")


def test_the_packaged_chart_names_the_pushed_image_and_keeps_everything_else(release: ModuleType) -> None:
    """repository, tag and digest of the image: block are set; every other line, comments too, is kept."""
    original = (release.CHART_DIR / "values.yaml").read_text()
    edited = release.set_image_values(original, "registry.example.com/gpu/imexdra", "0.1.0", DIGEST)
    values, before = yaml.safe_load(edited), yaml.safe_load(original)
    assert values["image"] == {
        **before["image"],
        "repository": "registry.example.com/gpu/imexdra",
        "tag": "0.1.0",
        "digest": DIGEST,
    }
    assert {k: v for k, v in values.items() if k != "image"} == {
        k: v for k, v in before.items() if k != "image"
    }
    changed = [
        pair for pair in zip(original.splitlines(), edited.splitlines(), strict=True) if pair[0] != pair[1]
    ]
    assert len(changed) == 3


def test_a_values_file_without_the_image_keys_is_refused(release: ModuleType) -> None:
    """A chart whose image: block lost a key cannot be released silently half-pinned."""
    with pytest.raises(release.ReleaseError, match="no digest: line"):
        release.set_image_values('image:\n  repository: x\n  tag: ""\nother: 1\n', "r", "t", DIGEST)


def test_a_version_other_than_the_packages_is_refused_with_what_to_do(
    release: ModuleType, tmp_path: Path
) -> None:
    """VERSION must be pyproject's: the message says which files to bump; nothing is pushed."""
    with pytest.raises(release.ReleaseError, match=r"Bump pyproject.toml and the chart's version/appVersion"):
        release.release("registry.example.com", "9.9.9", archive=tmp_path / "missing.tar")


def test_a_missing_or_uncommitted_image_is_refused(release: ModuleType, tmp_path: Path) -> None:
    """No archive: build it first; an image of an uncommitted tree needs --allow-dirty."""
    version = release.package_version()
    with pytest.raises(release.ReleaseError, match="run `make image` first"):
        release.release("registry.example.com", version, archive=tmp_path / "imexdra.tar")
    archive = tmp_path / "imexdra.tar"
    archive.write_bytes(b"")
    archive.with_suffix(".revision").write_text("0123abcd-dirty\n")
    with pytest.raises(release.ReleaseError, match="uncommitted tree"):
        release.release("registry.example.com", version, archive=archive)
