"""``Imex`` backed by the binaries: ``nvidia-imex -c <config>`` as a child, ``nvidia-imex-ctl`` to query.

Which binaries run is the caller's choice (names looked up on ``PATH``, or absolute paths): NVIDIA's on
a GPU node, the simulated ones from ``imexdra_sim.devices.fakeimex`` on a test node. The child inherits
stdout and stderr, so IMEX's own log lines (``LOG_FILE_NAME=`` empty) end up in the pod log.

The child is asked to receive SIGTERM when its parent dies: in a container the PID namespace would
take it down with the daemon, but a daemon killed outright on a shared host (or a simulated node) must
not leave an orphan holding the IMEX ports that its successor needs.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import signal
from pathlib import Path

from imexdra.devices.imex import ImexError, QueryResult
from imexdra.devices.imexctl import QUERY_TIMEOUT_SECONDS, query_daemon

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _terminate_with_parent() -> None:
    # Runs in the forked child before exec; only a syscall, no Python-level locks.
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


class SubprocessImex:
    """Runs and queries IMEX through its executables."""

    def __init__(
        self,
        config: Path,
        *,
        imex_binary: str = "nvidia-imex",
        ctl_binary: str = "nvidia-imex-ctl",
        query_timeout: float = QUERY_TIMEOUT_SECONDS,
    ) -> None:
        """Use ``config`` (the rendered ``imexd.cfg``) for both the daemon and its queries."""
        self.config = config
        self.imex_binary = imex_binary
        self.ctl_binary = ctl_binary
        self._query_timeout = query_timeout
        self._process: asyncio.subprocess.Process | None = None

    @property
    def pid(self) -> int | None:
        """PID of the running child, None when none is running."""
        process = self._process
        return process.pid if process is not None and process.returncode is None else None

    async def start(self) -> int:
        """Start ``nvidia-imex -c <config>``; the child keeps our stdout and stderr."""
        if self.pid is not None:
            raise ImexError(f"nvidia-imex already running (pid {self.pid})")
        try:
            self._process = await asyncio.create_subprocess_exec(
                self.imex_binary,
                "-c",
                str(self.config),
                stdin=asyncio.subprocess.DEVNULL,
                preexec_fn=_terminate_with_parent,  # a single async-signal-safe syscall
            )
        except OSError as error:
            raise ImexError(f"start {self.imex_binary}: {error}") from error
        return self._process.pid

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the running child."""
        process = self._process
        if process is None or process.returncode is not None:
            raise ImexError(f"cannot send {signal.Signals(signum).name}: nvidia-imex is not running")
        try:
            process.send_signal(signum)
        except ProcessLookupError as error:
            raise ImexError(f"cannot send {signal.Signals(signum).name}: {error}") from error

    async def wait(self) -> int:
        """Wait for the running (or last) child to exit and return its exit code."""
        if self._process is None:
            raise ImexError("nvidia-imex was never started")
        return await self._process.wait()

    async def stop(self, *, grace: float) -> int | None:
        """SIGTERM the child and wait; SIGKILL it if it is still there after ``grace`` seconds."""
        process = self._process
        if process is None:
            return None
        if process.returncode is None:
            try:
                process.terminate()
                return await asyncio.wait_for(asyncio.shield(process.wait()), timeout=grace)
            except ProcessLookupError:
                pass
            except TimeoutError:
                process.kill()
        return await process.wait()

    async def query(self) -> QueryResult:
        """Run ``nvidia-imex-ctl -c <config> -q`` (in a worker thread) and return its answer."""
        return await asyncio.to_thread(query_daemon, self.ctl_binary, self.config, self._query_timeout)
