"""The per-ComputeDomain directories ``domains/<uid>``: made, filled and removed without following links.

Each directory is bind-mounted writable at ``/imexd`` into the domain's IMEX daemon containers, so its
entries are the daemon's to plant: a compromised daemon can put a symbolic link there naming any file
of the host (``imexd.cfg.tmpl`` -> ``/etc/shadow``). The plugin runs privileged, so it never resolves a
path through such a directory (docs/data-path.md §7.5):

- ``domains`` and ``domains/<uid>`` are opened with ``O_NOFOLLOW | O_DIRECTORY``, relative to the
  plugin's data directory (the trusted root, whose own path may be a link: some hosts link
  ``/var/lib/kubelet`` elsewhere), and must be directories owned by the plugin's user;
- files are written under a temporary name opened ``O_CREAT | O_EXCL | O_NOFOLLOW`` relative to the
  directory's descriptor, ``fchmod``-ed, then renamed over the target: a link at either name is
  replaced or removed, never written through;
- orphaned directories are removed with ``shutil.rmtree`` on a directory descriptor; it walks by
  descriptors and unlinks links instead of following them (``shutil.rmtree.avoids_symlink_attacks``).

Only one prepare runs at a time on a node (``pu.lock``), so one fixed temporary name suffices.
Blocking: async callers use ``asyncio.to_thread``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import structlog

_log = structlog.get_logger(__name__)

DOMAIN_DIR_MODE = 0o755
TEMPLATE_NAME = "imexd.cfg.tmpl"
TEMPLATE_MODE = 0o644

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafeDirectoryError(OSError):
    """A directory the plugin writes into is a link, not a directory, or owned by another user."""


def prepare_domain_dir(domains_dir: Path, uid: str, template: bytes | None) -> None:
    """Create ``domains_dir/<uid>`` (mode 0755) if missing; replace its ``imexd.cfg.tmpl`` with ``template``.

    ``uid`` is one plain file name (``PluginPaths.domain_dir`` checks it). ``template`` None leaves the
    directory's files alone.

    Raises:
        UnsafeDirectoryError: ``domains_dir`` or the domain's directory is not a directory this
            plugin owns (a link included).
        OSError: creating or writing failed (the domain's files are then as they were).

    """
    with _directory(domains_dir.parent, domains_dir.name) as domains, _directory(domains, uid) as domain:
        if template is not None:
            replace_file(domain, TEMPLATE_NAME, template, mode=TEMPLATE_MODE)


def replace_file(dir_fd: int, name: str, data: bytes, *, mode: int) -> None:
    """Replace ``name`` in the directory ``dir_fd`` with ``data`` (mode ``mode``), following no link.

    Raises:
        OSError: e.g. ``name`` is a directory; a temporary file is not left behind.

    """
    temp = f".{name}.tmp"
    fd = _create_exclusive(dir_fd, temp)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
        os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp, dir_fd=dir_fd)
        raise


def remove_orphaned_domain_dirs(domains_dir: Path, known_uids: set[str]) -> list[str]:
    """Remove ``domains_dir/<uid>`` for every ``uid`` not in ``known_uids``; return those removed.

    Entries that are not directories (links included) are left alone; a directory that cannot be
    removed completely is logged and tried again next time.
    """
    try:
        domains = os.open(domains_dir, _DIR_FLAGS)
    except FileNotFoundError:
        return []
    removed = []
    try:
        with os.scandir(domains) as entries:
            orphans = sorted(
                entry.name
                for entry in entries
                if entry.is_dir(follow_symlinks=False) and entry.name not in known_uids
            )
        for name in orphans:
            try:
                shutil.rmtree(name, dir_fd=domains)
            except OSError as error:
                _log.warning("Cannot remove directory of a deleted ComputeDomain", uid=name, error=str(error))
                continue
            _log.info("Removed directory of a deleted ComputeDomain", path=str(domains_dir / name))
            removed.append(name)
    finally:
        os.close(domains)
    return removed


@contextlib.contextmanager
def _directory(parent: int | Path, name: str) -> Iterator[int]:
    """``name`` in ``parent`` (a descriptor, or a trusted path), created if missing, opened without links."""
    dir_fd, base = (parent, name) if isinstance(parent, int) else (None, str(parent / name))
    with contextlib.suppress(FileExistsError):
        os.mkdir(base, DOMAIN_DIR_MODE, dir_fd=dir_fd)
    try:
        fd = os.open(base, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafeDirectoryError(f"{base} is not a directory (a symbolic link is refused)") from error
        raise
    try:
        status = os.fstat(fd)
        if not stat.S_ISDIR(status.st_mode) or status.st_uid != os.geteuid():
            raise UnsafeDirectoryError(
                f"{base} is owned by uid {status.st_uid}, not by this plugin (uid {os.geteuid()}): "
                "refusing to write into it"
            )
        yield fd
    finally:
        os.close(fd)


def _create_exclusive(dir_fd: int, name: str) -> int:
    """Create ``name`` in ``dir_fd`` for writing; an entry already there (a leftover, a link) is unlinked."""
    try:
        return os.open(name, _NEW_FILE_FLAGS, 0o600, dir_fd=dir_fd)
    except FileExistsError:
        # unlinkat removes a link itself, never its target; a directory here fails with EISDIR.
        os.unlink(name, dir_fd=dir_fd)
    return os.open(name, _NEW_FILE_FLAGS, 0o600, dir_fd=dir_fd)
