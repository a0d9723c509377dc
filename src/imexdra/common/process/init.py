"""Being a container's PID 1: reap orphaned processes and forward signals (docs/data-path.md §9.5).

A container's first process is the init of its PID namespace. Two duties come with that which a
program written as an ordinary process does not perform:

- **Orphans are re-parented to it**, and only it can reap them. The compute-domain daemon's pod runs
  ``compute-domain-daemon check`` as an exec probe; when a probe outlives the kubelet's timeout, the
  runtime kills the probe process but not the ``nvidia-imex-ctl`` it started, which then exits as a
  child of PID 1. A PID 1 that never calls ``wait`` for it keeps it as a zombie for the pod's life:
  one per timed-out probe, until the node's PID limit is reached.
- **Signals without a handler are dropped** for PID 1, even SIGTERM from the kubelet (only SIGKILL
  gets through).

:func:`stay_init_if_pid1` keeps the program an ordinary process anyway, as ``tini``-style inits do: when
the caller is PID 1 it forks; the parent stays behind as a minimal init — it forwards the usual
signals to the child, reaps every process that ends, and exits with the child's status when the
child ends — while the child returns and carries on as the program. Elsewhere (a process started by
a shell or a test) it returns at once, doing nothing. No extra binary in the image and no change to
the pod's command, so the DaemonSet stays as upstream renders it.
"""

from __future__ import annotations

import contextlib
import os
import signal
from types import FrameType

#: What the init passes on to the program; everything else (SIGCHLD, SIGWINCH...) is the init's own.
FORWARDED_SIGNALS = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)


def stay_init_if_pid1() -> None:
    """When this process is PID 1, fork: the parent becomes the init and never returns.

    Returns in the child (the program, no longer PID 1) or, when not PID 1, in the caller unchanged.
    """
    if os.getpid() != 1:
        return
    child = _Child()
    # Installed before the fork: a SIGTERM arriving before the child's PID is known is held, not lost.
    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, child.forward)
    pid = os.fork()
    if pid == 0:
        for signum in FORWARDED_SIGNALS:
            signal.signal(signum, signal.SIG_DFL)
        return
    child.started(pid)
    os._exit(_reap_until(pid))


class _Child:
    """The program's PID once forked, and the signals that came before it was known."""

    def __init__(self) -> None:
        self.pid = 0
        self._held: list[int] = []

    def forward(self, signum: int, _frame: FrameType | None) -> None:
        """Signal handler: pass ``signum`` on, or hold it until the child exists."""
        if self.pid:
            _kill(self.pid, signum)
        else:
            self._held.append(signum)

    def started(self, pid: int) -> None:
        """The child exists: deliver what was held."""
        self.pid = pid
        for signum in self._held:
            _kill(pid, signum)
        self._held.clear()


def _kill(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # it has just ended; the reaper is about to see it
        os.kill(pid, signum)


def _reap_until(pid: int) -> int:
    """Reap every child as it ends; return the exit code for ``pid``'s end (128+N for signal N)."""
    while True:
        try:
            ended, status = os.wait()
        except ChildProcessError:  # cannot happen while ``pid`` lives; be safe rather than spin
            return 1
        if ended == pid:
            code = os.waitstatus_to_exitcode(status)
            return 128 - code if code < 0 else code
