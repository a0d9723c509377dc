"""``Imex`` without processes, for unit tests of whatever supervises IMEX.

``FakeImex`` hands out increasing fake PIDs, records every start, signal and stop with the event-loop
time it happened at, and lets a test end the current "process" as if it crashed (``exit``, optionally
with the lines it printed) or make starts fail (``fail_next_starts``). ``query`` answers ``READY``
while a process runs and ``ready`` is set. For the faithful, networked simulation of nvidia-imex see
``imexdra_sim.devices.fakeimex``.
"""

from __future__ import annotations

import asyncio
import signal
from dataclasses import dataclass

from imexdra.devices.imex import READY_OUTPUT, ImexError, QueryResult


@dataclass(frozen=True, slots=True)
class Recorded:
    """One call the fake saw: when (loop time), which PID it concerned, and the signal if any."""

    at: float
    pid: int
    signum: int | None = None


class FakeImex:
    """An in-memory IMEX process and control tool."""

    def __init__(self) -> None:
        """Start with no process, ready once started."""
        self.ready = True
        self.fail_next_starts = 0
        self.starts: list[Recorded] = []
        self.signals: list[Recorded] = []
        self.stops: list[Recorded] = []
        self._next_pid = 1000
        self._pid: int | None = None
        self._exit: asyncio.Future[int] | None = None
        self._output: tuple[str, ...] = ()

    @property
    def pid(self) -> int | None:
        """PID of the running fake process."""
        return self._pid

    @property
    def output_tail(self) -> tuple[str, ...]:
        """What the current (or last) process "printed": the lines given to ``exit``."""
        return self._output

    async def start(self) -> int:
        """Start a fake process (or fail, while ``fail_next_starts`` is positive)."""
        if self._pid is not None:
            raise ImexError(f"nvidia-imex already running (pid {self._pid})")
        if self.fail_next_starts > 0:
            self.fail_next_starts -= 1
            raise ImexError("start nvidia-imex: simulated failure")
        self._next_pid += 1
        self._pid = self._next_pid
        self._output = ()
        self._exit = asyncio.get_running_loop().create_future()
        self.starts.append(Recorded(self._now(), self._pid))
        return self._pid

    def signal(self, signum: int) -> None:
        """Record ``signum``; SIGTERM and SIGKILL end the process."""
        if self._pid is None:
            raise ImexError(f"cannot send {signal.Signals(signum).name}: nvidia-imex is not running")
        self.signals.append(Recorded(self._now(), self._pid, signum))
        if signum in (signal.SIGTERM, signal.SIGKILL):
            self.exit(-signum)

    async def wait(self) -> int:
        """Wait until the current process ends."""
        if self._exit is None:
            raise ImexError("nvidia-imex was never started")
        return await asyncio.shield(self._exit)

    async def stop(self, *, grace: float) -> int | None:
        """End the process as SIGTERM would."""
        if self._exit is None:
            return None
        if self._pid is not None:
            self.stops.append(Recorded(self._now(), self._pid))
            self.exit(-signal.SIGTERM)
        return await self.wait()

    async def query(self) -> QueryResult:
        """``READY`` while running and ``ready``; ``NOT_READY`` (exit 1) otherwise."""
        if self._pid is not None and self.ready:
            return QueryResult(0, READY_OUTPUT)
        return QueryResult(1, "NOT_READY\n")

    def exit(self, code: int = 1, output: tuple[str, ...] = ()) -> None:
        """End the current process with ``code``, as if it died on its own after printing ``output``."""
        if self._pid is None or self._exit is None:
            raise ImexError("nvidia-imex is not running")
        self._output = output
        self._pid = None
        self._exit.set_result(code)

    @staticmethod
    def _now() -> float:
        return asyncio.get_running_loop().time()
