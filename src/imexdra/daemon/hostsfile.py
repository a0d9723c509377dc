"""The daemon's managed block in a hosts file: ``compute-domain-daemon-<hash>-NNNN`` → peer IP.

In DNS-names mode nvidia-imex resolves its static node list through the hosts file, so membership
changes are hosts-file rewrites plus SIGUSR1. The file belongs to the pod (the kubelet bind-mounts a
per-pod ``/etc/hosts``), but on a simulated node several daemons may share one host, hence the path is
configurable.

Rules, upstream's minus its quirks (docs/compatibility.md §3.3):

- every line mentioning ``compute-domain-daemon-`` is ours and is dropped (a stale or user line must
  not shadow a mapping), every other line is kept verbatim; so the lines of the older names
  (``compute-domain-daemon-NNNN``, before upstream #1448) an upgraded pod may hold go too;
- the block holds what the caller maps: in DNS-names mode every slot of the domain, unused ones at
  the sentinel address (``daemon.planning``);
- the managed block is one header line followed by ``IP<TAB>name`` lines sorted by name; the header is
  not repeated on each rewrite and lines are not re-trimmed;
- the file is rewritten in place (a bind-mounted file cannot be replaced by rename) and only when its
  content changes: overwritten from its start and then cut to length, never truncated first, so a
  reader (nvidia-imex on SIGUSR1) sees the old or the new block, not an empty file;
- a symbolic link at the path is refused rather than followed (``O_NOFOLLOW``), and a new file gets
  its mode through its descriptor, so no other file is ever written or re-moded (docs/tenancy.md).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Mapping
from pathlib import Path

from imexdra.daemon.imexconfig import DNS_NAME_PREFIX

HEADER = "# Compute Domain Daemon mappings"
HOSTS_FILE_MODE = 0o644

_OPEN_FLAGS = os.O_NOFOLLOW | os.O_CLOEXEC


def render_hosts(existing: str, mapping: Mapping[str, str]) -> str:
    """``existing`` hosts-file text with our block replaced by ``mapping`` (name → IP)."""
    kept = [line for line in existing.splitlines() if DNS_NAME_PREFIX not in line and line != HEADER]
    while kept and not kept[-1].strip():
        kept.pop()
    block = [HEADER, *(f"{mapping[name]}\t{name}" for name in sorted(mapping))] if mapping else []
    lines = [*kept, *([""] if kept and block else []), *block]
    return "\n".join(lines) + "\n" if lines else ""


def managed_mappings(text: str) -> dict[str, str]:
    """The name → IP mappings of our block found in hosts-file ``text``."""
    mapping: dict[str, str] = {}
    for line in text.splitlines():
        fields = line.split("#", 1)[0].split()
        if len(fields) >= 2 and fields[1].startswith(DNS_NAME_PREFIX):
            mapping[fields[1]] = fields[0]
    return mapping


def update_hosts_file(path: Path, mapping: Mapping[str, str]) -> bool:
    """Make ``path``'s managed block equal ``mapping``; tell whether the file changed.

    Blocking: async callers use ``asyncio.to_thread``. A missing file is created (mode 0644).

    Raises:
        OSError: ``path`` is a symbolic link (refused, nothing written), or reading or writing failed.

    """
    existing = _read(path)
    wanted = render_hosts(existing or "", mapping)
    if wanted == existing:
        return False
    flags = os.O_WRONLY | _OPEN_FLAGS | (os.O_CREAT if existing is None else 0)
    fd = _open(path, flags)
    try:
        if existing is None:
            os.fchmod(fd, HOSTS_FILE_MODE)
        # Overwrite from the start, then cut to length: never truncate first. nvidia-imex re-reads the
        # file on SIGUSR1 whenever the signal lands; opened with O_TRUNC, a read between the truncation
        # and the write found an empty file, resolved none of the node list and took its own node ID
        # for gone (docs/compatibility.md §3.3). A shorter text is written padded with blank lines to
        # the old length, so until the cut a reader finds those, not the old file's last lines.
        data = wanted.encode()
        padded = data + b"\n" * max(0, len((existing or "").encode()) - len(data))
        written = 0
        while written < len(padded):
            written += os.pwrite(fd, padded[written:], written)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)
    return True


def _read(path: Path) -> str | None:
    """``path``'s text, or None when there is no such file."""
    try:
        fd = _open(path, os.O_RDONLY | _OPEN_FLAGS)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, encoding="utf-8") as hosts:
        return hosts.read()


def _open(path: Path, flags: int) -> int:
    try:
        return os.open(path, flags, HOSTS_FILE_MODE)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise OSError(
                errno.ELOOP, "hosts file is a symbolic link; refusing to follow it", str(path)
            ) from error
        raise
