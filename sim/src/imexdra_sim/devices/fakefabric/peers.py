"""Which IMEX channel the process at the other end of a TCP connection holds, read as a driver would.

The fake fabric (docs/fake-fabric.md §3) must never take a caller's word for its channel. It looks
at the caller's open files instead, through the host's ``/proc``:

1. the connection's peer address names a socket in some network namespace; ``/proc/<pid>/net/tcp``
   of any process in that namespace lists it, with its inode;
2. the process whose ``/proc/<pid>/fd/*`` links read ``socket:[<inode>]`` owns it;
3. that process's other fds that are character devices of the channels' major are the channels it
   holds (``O_PATH`` fds count: on simulated nodes the major has no kernel driver behind it).

Only IPv4 is read (``/proc/<pid>/net/tcp``): the simulated pod networks are IPv4.
"""

from __future__ import annotations

import ipaddress
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


@dataclass(frozen=True, slots=True)
class Peer:
    """The process behind a connection and the channel numbers it holds (minor numbers, sorted)."""

    pid: int
    channels: tuple[int, ...]


def _hex_address(host: str, port: int) -> str:
    """An IPv4 address and port as ``/proc/net/tcp`` writes them (``0100007F:1F90``)."""
    packed = ipaddress.IPv4Address(host).packed
    return f"{int.from_bytes(packed, 'little'):08X}:{port:04X}"


def _namespaces(proc: Path) -> dict[str, list[int]]:
    """Every process by network namespace (``net:[<inode>]``), so each namespace's table is read once."""
    by_namespace: dict[str, list[int]] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            namespace = str((entry / "ns" / "net").readlink())
        except OSError:  # exited meanwhile
            continue
        by_namespace.setdefault(namespace, []).append(int(entry.name))
    return by_namespace


def _socket_inode(proc: Path, pids: list[int], local: str, remote: str) -> int | None:
    """The inode of the socket ``local → remote`` in the namespace of ``pids``, if listed there."""
    for pid in pids:  # the first process whose table is readable speaks for the namespace
        try:
            lines = (proc / str(pid) / "net" / "tcp").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[1] == local and fields[2] == remote:
                return int(fields[9])
        return None
    return None


def _fd_targets(proc: Path, pid: int) -> Iterator[tuple[Path, str]]:
    try:
        fds = list((proc / str(pid) / "fd").iterdir())
    except OSError:
        return
    for fd in fds:
        try:
            yield fd, str(fd.readlink())
        except OSError:  # closed meanwhile
            continue


def find_peer(
    peer: tuple[str, int], server: tuple[str, int], *, major: int, proc: Path = PROC
) -> Peer | None:
    """The process whose socket ``peer`` is connected to ``server``, and its channels of ``major``.

    None when no process owns such a socket any more (it exited, or the connection was not local).
    """
    local, remote = _hex_address(*peer), _hex_address(*server)
    for pids in _namespaces(proc).values():
        inode = _socket_inode(proc, pids, local, remote)
        if inode is None:
            continue
        wanted = f"socket:[{inode}]"
        for pid in pids:
            targets = list(_fd_targets(proc, pid))
            if any(target == wanted for _, target in targets):
                return Peer(pid=pid, channels=_channels(targets, major))
    return None


def _channels(targets: list[tuple[Path, str]], major: int) -> tuple[int, ...]:
    found = set()
    for fd, _target in targets:
        try:
            info = fd.stat()  # follows the link: the file the fd refers to, O_PATH fds included
        except OSError:
            continue
        if stat.S_ISCHR(info.st_mode) and os.major(info.st_rdev) == major:
            found.add(os.minor(info.st_rdev))
    return tuple(sorted(found))
