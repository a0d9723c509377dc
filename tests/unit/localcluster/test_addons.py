"""The lock that keeps two local clusters' MPI operators off one hard-coded port of one network namespace."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

from imexdra_sim.localcluster.addons import health_port_lock, hold_health_port_lock
from imexdra_sim.localcluster.processes import ClusterStartError


def test_second_holder_gets_a_clear_error_until_the_first_child_exits(tmp_path: Path) -> None:
    """The lock passes to the child that inherits it and is free again once that child is gone."""
    lock_path = str(tmp_path / "port.lock")
    fd = hold_health_port_lock(lock_path, timeout=1)
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE, pass_fds=(fd,)
    )
    os.close(fd)  # only the child holds it now
    try:
        with pytest.raises(ClusterStartError, match="still holds :8080"):
            hold_health_port_lock(lock_path, timeout=0.2)
    finally:
        assert child.stdin is not None
        child.stdin.close()
        child.wait(10)
    again = hold_health_port_lock(lock_path, timeout=1)
    other = os.open(lock_path, os.O_RDWR)
    try:
        with pytest.raises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(other)
        os.close(again)


def test_the_health_port_lock_is_one_per_network_namespace() -> None:
    """A process in a network namespace of its own (a test lane) gets another lock; ours is stable."""
    ours = health_port_lock()
    assert ours == health_port_lock()
    code = "from imexdra_sim.localcluster.addons import health_port_lock; print(health_port_lock())"
    theirs = subprocess.run(
        ["unshare", "--net", "--", sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert theirs.startswith("/tmp/imexdra-mpi-operator-8080-net") and theirs != ours
