"""The fake fabric's view of a caller (docs/fake-fabric.md §3): found through /proc, never asked.

Each test connects a real TCP socket to a real listening socket in this process and holds (or not)
an ``O_PATH`` fd on a real character device made with mknod, with a major no kernel driver serves.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from imexdra_sim.devices.fakefabric.peers import Peer, find_peer

MAJOR = 509
"""A major number with no driver behind it, as the simulated nodes' IMEX channel major."""


@pytest.fixture
def connection() -> Iterator[tuple[tuple[str, int], tuple[str, int]]]:
    """A connected pair on loopback: (the caller's address, the fabric's address)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        with socket.create_connection(server.getsockname()) as caller:
            accepted, _ = server.accept()
            with accepted:
                yield caller.getsockname(), server.getsockname()


@contextlib.contextmanager
def holding(directory: Path, minor: int) -> Iterator[None]:
    """An O_PATH fd held on a character device (MAJOR, minor), as the probe holds its channel."""
    node = directory / f"channel{minor}"
    os.mknod(node, stat.S_IFCHR | 0o600, os.makedev(MAJOR, minor))
    fd = os.open(node, os.O_PATH)
    try:
        yield
    finally:
        os.close(fd)


def test_the_callers_channel_is_read_from_its_open_files(
    connection: tuple[tuple[str, int], tuple[str, int]], tmp_path: Path
) -> None:
    """The process behind the connection is this one, holding channel 7 (and only that, of MAJOR)."""
    caller, fabric = connection
    with holding(tmp_path, 7):
        assert find_peer(caller, fabric, major=MAJOR) == Peer(pid=os.getpid(), channels=(7,))


def test_a_caller_without_a_channel_holds_none(
    connection: tuple[tuple[str, int], tuple[str, int]], tmp_path: Path
) -> None:
    """No channel fd open: found, but holding nothing; a device node merely present does not count."""
    caller, fabric = connection
    os.mknod(tmp_path / "channel3", stat.S_IFCHR | 0o600, os.makedev(MAJOR, 3))
    assert find_peer(caller, fabric, major=MAJOR) == Peer(pid=os.getpid(), channels=())


def test_other_devices_are_not_channels(
    connection: tuple[tuple[str, int], tuple[str, int]], tmp_path: Path
) -> None:
    """Only fds of the channels' major count (this process also has /dev/null and others open)."""
    caller, fabric = connection
    with holding(tmp_path, 2), Path("/dev/null").open("rb"):
        assert find_peer(caller, fabric, major=MAJOR) == Peer(pid=os.getpid(), channels=(2,))


def test_an_unknown_connection_has_no_peer(connection: tuple[tuple[str, int], tuple[str, int]]) -> None:
    """A peer address no socket has: None, not a guess."""
    _, fabric = connection
    assert find_peer(("127.0.0.1", 1), fabric, major=MAJOR) is None
