"""Keeps nvidia-imex running: start on request, restart with backoff, paced SIGUSR1, clean stop.

- Once ``start()`` was called, the process is kept running: if it exits on its own it is started
  again after a jittered exponential backoff (1 s doubling to 30 s; the count resets once a process
  ran ``stable_after`` seconds), so a crash-looping IMEX cannot spin the node.
- ``reload()`` sends SIGUSR1, but never sooner than ``reload_interval`` after the previous signal or
  the process start: IMEX processes SIGUSR1 at most once per 5 s and silently drops extra ones, and a
  process that has just started has read the current files anyway (and may not handle SIGUSR1 yet).
  Requests arriving inside that window are coalesced into one signal at its end. A signal sent less
  than two intervals after the previous one (the one at a window's end included) is followed by one
  more, an interval later: IMEX counts its 5 s from when it handled the previous signal, which on a
  loaded node can be well after we sent it, so it may drop ours, and with it the change it carried
  (seen on the 18-tray rack). The extra signal, unless a new request came meanwhile, is not itself
  followed by another (docs/compatibility.md §3.3).
- ``restart()`` stops (SIGTERM, SIGKILL after ``stop_grace``) and starts at once; it is not a failure.
- Cancelling ``run()`` forwards termination: the process is stopped the same way before ``run`` ends.
- A child that exits having printed ``NV_ERR_IN_USE`` found this node's IMEX role taken by another
  IMEX daemon: with driver-managed IMEX, the host's own ``nvidia-imex`` service, which newer platforms
  enable by default. One such exit may be a predecessor still letting go; ``in_use_exits`` of them in
  a row end ``run()`` with ``ImexInUseError``, which says so and what to do. The daemon then exits
  with that message as its termination message, which ``kubectl describe pod`` shows and the
  controller repeats in the ComputeDomain's ``DaemonFailing`` event naming the node
  (docs/host-managed.md, "Host-managed to driver-managed").

Only membership planning decides between reload and restart (``daemon.planning``); this class just
carries the decision out against the ``Imex`` boundary.
"""

from __future__ import annotations

import asyncio
import signal

import structlog

from imexdra.common.errors import PermanentError
from imexdra.common.pacing.ratelimit import Backoff
from imexdra.devices.imex import SIGUSR1_MIN_INTERVAL, Imex, ImexError

_log = structlog.get_logger(__name__)

#: What nvidia-imex prints when the node's IMEX role is taken (the driver's status name).
IN_USE_MARK = "NV_ERR_IN_USE"
IN_USE_EXITS = 3
IN_USE_MESSAGE = (
    "nvidia-imex failed with NV_ERR_IN_USE {count} times in a row: another IMEX daemon already serves "
    "this node, most likely the host's own nvidia-imex service (enabled by default on newer platforms). "
    "With driver-managed IMEX it must not run: stop and disable it on this node (systemctl disable --now "
    "nvidia-imex), or install the driver with HostManagedIMEX to use the host's IMEX instead"
)


class ImexInUseError(PermanentError):
    """nvidia-imex keeps failing with NV_ERR_IN_USE: another IMEX daemon serves this node."""


class ImexSupervisor:
    """Supervises one ``Imex`` backend from a single ``run()`` task."""

    def __init__(
        self,
        imex: Imex,
        *,
        restart_backoff: Backoff | None = None,
        stable_after: float = 60.0,
        reload_interval: float = SIGUSR1_MIN_INTERVAL + 0.5,
        stop_grace: float = 10.0,
        in_use_exits: int = IN_USE_EXITS,
    ) -> None:
        """Supervise ``imex``; the defaults suit real IMEX, tests shrink them."""
        self.imex = imex
        self.starts = 0
        self.exits = 0
        self.reloads = 0
        self._in_use_limit = in_use_exits
        self._in_use_in_a_row = 0
        self._backoff = restart_backoff or Backoff(base=1.0, cap=30.0, jitter=0.25)
        self._stable_after = stable_after
        self._reload_interval = reload_interval
        self._stop_grace = stop_grace
        self._wanted = asyncio.Event()
        self._restart = asyncio.Event()
        self._last_signal = -float("inf")
        self._reload_timer: asyncio.TimerHandle | None = None
        #: A reload was requested that no signal has carried yet.
        self._requested = False
        #: The last signal window began with a signal (True) or with the process start (False).
        self._signalled = False

    @property
    def pid(self) -> int | None:
        """PID of the running IMEX process."""
        return self.imex.pid

    def start(self) -> None:
        """Have IMEX running from now on (idempotent)."""
        self._wanted.set()

    def restart(self) -> None:
        """Stop and start IMEX now (no-op while it is not running: its next start reads the files)."""
        if self.imex.pid is not None:
            self._restart.set()

    def reload(self) -> None:
        """Send SIGUSR1 as soon as IMEX accepts one; no-op while it is not running."""
        if self.imex.pid is None:
            return
        self._requested = True
        if self._reload_timer is not None:
            return  # the pending signal will carry this request
        loop = asyncio.get_running_loop()
        delay = self._last_signal + self._reload_interval - loop.time()
        if delay <= 0:  # a signal less than two intervals ago may still be in IMEX's window
            self._send_reload(after_signal=self._signalled and -delay < self._reload_interval)
        else:
            _log.info("IMEX daemon reload deferred", seconds=round(delay, 2))
            self._reload_timer = loop.call_later(delay, self._send_reload, self._signalled)

    def _send_reload(self, after_signal: bool) -> None:
        """Signal now; ``after_signal``: the window just ended was a signal's, not the start's."""
        self._reload_timer = None
        if self.imex.pid is None:
            return
        try:
            self.imex.signal(signal.SIGUSR1)
        except ImexError as error:
            _log.warning("Failed to send SIGUSR1 to the IMEX daemon", error=str(error))
            return
        carried, self._requested = self._requested, False  # a failed send leaves its request pending
        loop = asyncio.get_running_loop()
        self._last_signal = loop.time()
        self._signalled = True
        self.reloads += 1
        _log.info("Sent SIGUSR1 to the IMEX daemon", pid=self.imex.pid, signal="SIGUSR1")
        if carried and after_signal:  # this one may be dropped: repeat it once, unless asked again
            self._reload_timer = loop.call_later(self._reload_interval, self._send_reload, True)

    def _cancel_reload(self) -> None:
        if self._reload_timer is not None:
            self._reload_timer.cancel()
            self._reload_timer = None

    async def run(self) -> None:
        """Supervise until cancelled; then stop IMEX (SIGTERM, SIGKILL after the grace period)."""
        try:
            await self._wanted.wait()
            while True:
                await self._run_once()
        finally:
            self._cancel_reload()
            code = await self.imex.stop(grace=self._stop_grace)
            if code is not None:
                _log.info("IMEX daemon stopped", exit_code=code)

    async def _run_once(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            pid = await self.imex.start()
        except ImexError as error:
            delay = self._backoff.next_delay()
            _log.error("Failed to start the IMEX daemon", error=str(error), retry_in=round(delay, 2))
            await asyncio.sleep(delay)
            return
        started = self._last_signal = loop.time()
        self._signalled = False
        self.starts += 1
        self._restart.clear()
        _log.info("IMEX daemon started", pid=pid, starts=self.starts)
        exited = asyncio.ensure_future(self.imex.wait())
        restart = asyncio.ensure_future(self._restart.wait())
        try:
            await asyncio.wait({exited, restart}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            restart.cancel()
            if not exited.done():
                exited.cancel()
        self._cancel_reload()
        if exited.done() and not exited.cancelled():
            await self._after_exit(exited.result(), ran=loop.time() - started)
        else:
            _log.info("Restarting the IMEX daemon", pid=pid)
            await self.imex.stop(grace=self._stop_grace)

    async def _after_exit(self, code: int, *, ran: float) -> None:
        self.exits += 1
        if any(IN_USE_MARK in line for line in self.imex.output_tail):
            self._in_use_in_a_row += 1
            if self._in_use_in_a_row >= self._in_use_limit:
                raise ImexInUseError(IN_USE_MESSAGE.format(count=self._in_use_in_a_row))
            _log.warning("IMEX daemon found this node's IMEX role taken", mark=IN_USE_MARK, exit_code=code)
        else:
            self._in_use_in_a_row = 0
        if ran >= self._stable_after:
            self._backoff.reset()
        delay = self._backoff.next_delay()
        _log.warning(
            "IMEX daemon exited", exit_code=code, ran_seconds=round(ran, 1), restart_in=round(delay, 2)
        )
        await asyncio.sleep(delay)
