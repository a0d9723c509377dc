"""Crash-safe file replacement: a reader sees the old content or the new one, never a torn file.

The sequence is: write a temporary file in the target's directory, ``fsync`` it, set its mode,
rename it over the target, then ``fsync`` the directory so the rename itself is durable. With
``durable=False`` both ``fsync`` calls are skipped: the replacement is still atomic for every reader
and survives a process crash (the page cache keeps it), only not a power loss — for files that a
reboot makes worthless anyway.

The temporary name starts with ``.`` on purpose: upstream's checkpoint manager treats every non-dot
file in the plugin directory as a checkpoint candidate, and CDI scans only ``*.json``/``*.yaml``, so a
leftover temporary file (after a crash) is invisible to both.

Blocking I/O: async callers run these through ``asyncio.to_thread``.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: bytes, *, mode: int = 0o600, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically (and durably unless ``durable=False``); mode ``mode``.

    Raises:
        OSError: the directory is missing or not writable, or the disk is full. Nothing at ``path``
            changes in that case and the temporary file is removed.

    """
    directory = path.parent
    fd, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    temp_path = Path(temp_name)
    try:
        try:
            if data:
                # Allocating the blocks up front spares the rename below ext4's replace-by-rename
                # heuristic (auto_da_alloc), which starts writeback of the new file inside rename():
                # about 0.15 ms of every checkpoint write on the bench machine (docs/data-path.md §7.6).
                os.posix_fallocate(fd, 0, len(data))
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            # fchmod is not filtered by the umask, unlike the mode given to open().
            os.fchmod(fd, mode)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        temp_path.replace(path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            temp_path.unlink()
        raise
    if durable:
        fsync_directory(directory)


def remove_file(path: Path, *, durable: bool = True) -> bool:
    """Delete ``path``, durably unless ``durable=False`` (as ``write_atomic``); return whether it existed."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    if durable:
        fsync_directory(path.parent)
    return True


def fsync_directory(directory: Path) -> None:
    """Flush a directory's entries (creations, renames, deletions) to disk."""
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
