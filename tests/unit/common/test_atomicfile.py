"""imexdra.common.files.atomicfile: content, mode, no leftovers, failure leaves the target intact."""

import os
import stat
from pathlib import Path

import pytest

from imexdra.common.files.atomicfile import remove_file, write_atomic


@pytest.mark.parametrize("mode", [0o600, 0o644, 0o755], ids=["0600", "0644", "0755"])
def test_write_sets_content_and_mode(tmp_path: Path, mode: int) -> None:
    """The file gets the bytes and exactly the requested mode, whatever the umask."""
    target = tmp_path / "checkpoint.json"
    old_umask = os.umask(0o077)
    try:
        write_atomic(target, b"{}", mode=mode)
    finally:
        os.umask(old_umask)
    assert target.read_bytes() == b"{}"
    assert stat.S_IMODE(target.stat().st_mode) == mode


def test_replace_leaves_no_temp_files(tmp_path: Path) -> None:
    """Overwriting replaces the content and leaves only the target in the directory."""
    target = tmp_path / "spec.yaml"
    write_atomic(target, b"one")
    write_atomic(target, b"two")
    assert target.read_bytes() == b"two"
    assert [p.name for p in tmp_path.iterdir()] == ["spec.yaml"]


def test_failure_keeps_old_content(tmp_path: Path) -> None:
    """When the rename cannot happen, the old file is untouched and the temp file is gone."""
    target = tmp_path / "target"
    target.mkdir()
    (target / "occupant").write_text("x")
    with pytest.raises(OSError, match=r"Directory not empty|Is a directory"):
        write_atomic(target, b"new")
    assert (target / "occupant").read_text() == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["target"]


def test_remove_file(tmp_path: Path) -> None:
    """remove_file deletes and reports whether something was there."""
    target = tmp_path / "f"
    target.write_text("x")
    assert remove_file(target) is True
    assert not target.exists()
    assert remove_file(target) is False


@pytest.mark.parametrize("durable", [True, False], ids=["durable", "page-cache-only"])
def test_fsync_only_when_durable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durable: bool) -> None:
    """durable=False skips every fsync but still replaces atomically; the default syncs file and dir."""
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    target = tmp_path / "checkpoint.json"
    write_atomic(target, b"one", durable=durable)
    write_atomic(target, b"two", durable=durable)
    assert remove_file(target, durable=durable) is True
    assert not target.exists()
    assert len(synced) == (5 if durable else 0)  # two writes x (file + dir), one removal (dir)


def test_a_full_disk_keeps_old_content(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No space for the new content: the error propagates, the old file and nothing else remains."""
    target = tmp_path / "checkpoint.json"
    write_atomic(target, b"old")

    def full(fd: int, offset: int, length: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    with pytest.raises(OSError, match="No space left"):
        write_atomic(target, b"new")
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.json"]


@pytest.mark.parametrize("size", [0, 1, 4 << 20], ids=["empty", "one-byte", "4MiB"])
def test_any_size_is_written_whole(tmp_path: Path, size: int) -> None:
    """Empty files and files larger than one write() call are written whole."""
    target = tmp_path / "spec.yaml"
    data = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    write_atomic(target, data, durable=False)
    assert target.read_bytes() == data
