"""A node-global, cross-process exclusive lock on a file, usable from asyncio.

Why a file lock: more than one plugin process can run on a node (a rolling update starts the new pod
before the old one is gone), and prepare/unprepare must not interleave across them
(docs/architecture.md §4). ``fcntl.flock`` locks belong to the open file description, so two
acquisitions inside one process exclude each other as well — this doubles as the in-process lock.

Acquisition polls a non-blocking ``flock`` every ``poll_interval`` seconds until ``acquire_timeout``
(upstream: 10 s and 100 ms), so the event loop never blocks. The lock file is created (0644) if missing and is
never deleted: deleting it would let a waiter lock an unlinked inode while a newcomer locks a new one.
Cancelling the waiting task (e.g. an outer ``asyncio.timeout``) abandons the attempt cleanly.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

from imexdra.common.errors import RetryableError

DEFAULT_TIMEOUT = 10.0
DEFAULT_POLL_INTERVAL = 0.1


class LockError(RetryableError):
    """The lock could not be taken: another holder kept it past the timeout, or the OS refused."""

    def __init__(self, message: str, *, path: Path) -> None:
        super().__init__(message)
        self.path = path


class LockTimeoutError(LockError):
    """Another holder kept the lock for longer than the timeout."""


@contextlib.asynccontextmanager
async def hold(
    path: Path,
    *,
    acquire_timeout: float = DEFAULT_TIMEOUT,
    poll_interval: float = DEFAULT_POLL_INTERVAL,
) -> AsyncIterator[None]:
    """Hold an exclusive ``flock`` on ``path`` for the body of the ``async with``.

    Raises:
        LockTimeoutError: the lock stayed taken for longer than ``acquire_timeout`` seconds.
        LockError: opening or locking the file failed for another reason.

    """
    fd = await _acquire(path, acquire_timeout=acquire_timeout, poll_interval=poll_interval)
    try:
        yield
    finally:
        # Closing the descriptor releases the lock; the file stays for the next holder.
        os.close(fd)


async def _acquire(path: Path, *, acquire_timeout: float, poll_interval: float) -> int:
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as error:
        raise LockError(f"error acquiring lock ({path}): {error}", path=path) from error
    deadline = time.monotonic() + acquire_timeout
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockTimeoutError(f"timeout acquiring lock ({path})", path=path) from None
                await asyncio.sleep(poll_interval)
            except OSError as error:
                raise LockError(f"error acquiring lock ({path}): {error}", path=path) from error
            else:
                return fd
    except BaseException:
        os.close(fd)
        raise
