"""``Imex`` backed by the binaries: ``nvidia-imex -c <config>`` as a child, ``nvidia-imex-ctl`` to query.

Which binaries run is the caller's choice (names looked up on ``PATH``, or absolute paths): NVIDIA's on
a GPU node, the simulated ones from ``imexdra_sim.devices.fakeimex`` on a test node. The child's stdout
and stderr are pipes whose lines are copied, unchanged and as they come, to ours, so IMEX's own log
lines (``LOG_FILE_NAME=`` empty) still end up in the pod log; the last ``OUTPUT_TAIL_LINES`` of them
are kept, for the supervisor to read why a child exited (``output_tail``).

The child is asked to receive SIGTERM when its parent dies: in a container the PID namespace would
take it down with the daemon, but a daemon killed outright on a shared host (or a simulated node) must
not leave an orphan holding the IMEX ports that its successor needs.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ctypes
import ctypes.util
import signal
import sys
from pathlib import Path
from typing import TextIO

from imexdra.devices.imex import ImexError, QueryResult
from imexdra.devices.imexctl import QUERY_TIMEOUT_SECONDS, query_daemon, query_nodes
from imexdra.devices.imexnodes import NodesReport

_PR_SET_PDEATHSIG = 1
#: How many of the child's last output lines are kept.
OUTPUT_TAIL_LINES = 50
_CHUNK_BYTES = 65536
#: How long ``wait`` lets the copying finish after the child exited (a grandchild may hold the pipes).
_DRAIN_SECONDS = 2.0
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
        self._tail: collections.deque[str] = collections.deque(maxlen=OUTPUT_TAIL_LINES)
        self._copies: list[asyncio.Task[None]] = []

    @property
    def pid(self) -> int | None:
        """PID of the running child, None when none is running."""
        process = self._process
        return process.pid if process is not None and process.returncode is None else None

    @property
    def output_tail(self) -> tuple[str, ...]:
        """The last lines the running (or last) child printed on stdout and stderr, oldest first."""
        return tuple(self._tail)

    async def start(self) -> int:
        """Start ``nvidia-imex -c <config>``; its output is copied to ours, line by line."""
        if self.pid is not None:
            raise ImexError(f"nvidia-imex already running (pid {self.pid})")
        try:
            process = await asyncio.create_subprocess_exec(
                self.imex_binary,
                "-c",
                str(self.config),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                preexec_fn=_terminate_with_parent,  # a single async-signal-safe syscall
            )
        except OSError as error:
            raise ImexError(f"start {self.imex_binary}: {error}") from error
        self._process = process
        self._tail.clear()
        assert process.stdout is not None and process.stderr is not None  # both are pipes
        self._copies = [
            asyncio.create_task(self._copy(process.stdout, sys.stdout)),
            asyncio.create_task(self._copy(process.stderr, sys.stderr)),
        ]
        return process.pid

    async def _copy(self, source: asyncio.StreamReader, sink: TextIO) -> None:
        """Copy ``source`` to ``sink`` until end of file, in whole lines where it can, keeping the tail.

        Read in chunks rather than lines, so a line longer than the stream's limit cannot stop the
        copying (and, the pipe filling up, the child); text is written as a whole line so that it does
        not interleave with the daemon's own log lines mid-line.
        """
        buffered = b""
        while chunk := await source.read(_CHUNK_BYTES):
            buffered += chunk
            end = buffered.rfind(b"\n") + 1
            if not end and len(buffered) < _CHUNK_BYTES:
                continue
            ready, buffered = (buffered[:end], buffered[end:]) if end else (buffered, b"")
            self._emit(ready, sink)
        if buffered:
            self._emit(buffered, sink)

    def _emit(self, data: bytes, sink: TextIO) -> None:
        text = data.decode(errors="replace")
        with contextlib.suppress(OSError, ValueError):  # a closed sink must not stop the copying
            sink.write(text)
            sink.flush()
        self._tail.extend(text.splitlines())

    async def _drained(self) -> None:
        """Let the copying catch up with a child that has exited (bounded: a grandchild may hold on)."""
        copies = [task for task in self._copies if not task.done()]
        if copies:
            _, pending = await asyncio.wait(copies, timeout=_DRAIN_SECONDS)
            for task in pending:
                task.cancel()

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
        code = await self._process.wait()
        await self._drained()
        return code

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
        code = await process.wait()
        await self._drained()
        return code

    async def query(self) -> QueryResult:
        """Run ``nvidia-imex-ctl -c <config> -q`` (in a worker thread) and return its answer."""
        return await asyncio.to_thread(query_daemon, self.ctl_binary, self.config, self._query_timeout)

    async def nodes(self) -> NodesReport:
        """Run ``nvidia-imex-ctl -c <config> -N`` (in a worker thread): the connectivity table."""
        return await asyncio.to_thread(query_nodes, self.ctl_binary, self.config, self._query_timeout)
