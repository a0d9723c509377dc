"""imexdra.common.files.flock: mutual exclusion, timeout, release, cancellation."""

import asyncio
import fcntl
import os
import sys
from pathlib import Path

import pytest

from imexdra.common.errors import RetryableError
from imexdra.common.files.flock import LockError, LockTimeoutError, hold
from tests.support.waiting import stays_true


async def test_second_holder_waits_for_first(tmp_path: Path) -> None:
    """Two acquisitions in one process exclude each other; the second gets in after release."""
    path = tmp_path / "pu.lock"
    order: list[str] = []

    async def second() -> None:
        async with hold(path, acquire_timeout=2, poll_interval=0.01):
            order.append("second")

    async with hold(path):
        task = asyncio.create_task(second())
        await stays_true("the second holder kept out", lambda: order == [], for_seconds=0.1, interval=0.01)
        order.append("first-done")
    await task
    assert order == ["first-done", "second"]


async def test_timeout_when_held(tmp_path: Path) -> None:
    """A lock held past the timeout raises a retryable LockTimeoutError naming the file."""
    path = tmp_path / "pu.lock"
    async with hold(path):
        with pytest.raises(LockTimeoutError, match=r"timeout acquiring lock \(.*pu\.lock\)") as caught:
            async with hold(path, acquire_timeout=0.05, poll_interval=0.01):
                pass
    assert isinstance(caught.value, RetryableError)


async def test_excludes_other_processes(tmp_path: Path) -> None:
    """A lock held by another process blocks us until that process lets go."""
    path = tmp_path / "pu.lock"
    code = (  # holds the lock until its stdin closes
        "import fcntl,os,sys;"
        f"fd=os.open({str(path)!r},os.O_RDWR|os.O_CREAT);fcntl.flock(fd,fcntl.LOCK_EX);"
        "print('locked',flush=True);sys.stdin.read()"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert proc.stdin is not None and proc.stdout is not None
        assert await proc.stdout.readline() == b"locked\n"
        with pytest.raises(LockTimeoutError):
            async with hold(path, acquire_timeout=0.05, poll_interval=0.01):
                pass

        async def take() -> None:
            async with hold(path, acquire_timeout=5, poll_interval=0.01):
                pass

        waiting = asyncio.create_task(take())
        await stays_true("kept out while the other process holds it", lambda: not waiting.done(), 0.1, 0.01)
        proc.stdin.close()
        await asyncio.wait_for(waiting, 5)
    finally:
        if proc.stdin is not None and not proc.stdin.is_closing():
            proc.stdin.close()
        await asyncio.wait_for(proc.wait(), timeout=10)


async def test_release_keeps_file_and_frees_lock(tmp_path: Path) -> None:
    """After release the file still exists and anyone can lock it at once."""
    path = tmp_path / "pu.lock"
    async with hold(path):
        pass
    assert path.exists()
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(fd)


async def test_released_when_body_raises(tmp_path: Path) -> None:
    """An exception in the body releases the lock."""
    path = tmp_path / "pu.lock"
    with pytest.raises(RuntimeError):
        async with hold(path):
            raise RuntimeError("boom")
    async with hold(path, acquire_timeout=0.05):
        pass


async def test_cancelled_waiter_leaves_no_lock(tmp_path: Path) -> None:
    """Cancelling a waiting acquisition (outer timeout) leaves the lock usable afterwards."""
    path = tmp_path / "pu.lock"
    async with hold(path):
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.05):
                async with hold(path, acquire_timeout=10, poll_interval=0.01):
                    pass
    async with hold(path, acquire_timeout=0.05):
        pass


async def test_unopenable_path_is_lock_error(tmp_path: Path) -> None:
    """A path in a missing directory is a LockError, not an OSError."""
    with pytest.raises(LockError, match="error acquiring lock"):
        async with hold(tmp_path / "missing" / "pu.lock"):
            pass
