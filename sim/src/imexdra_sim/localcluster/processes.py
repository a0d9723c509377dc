"""Starting, watching and stopping the local cluster's processes.

Every child runs in its own session (process group) with its output in ``<logs>/<name>.log``, so
teardown can kill a child together with everything it started, and a failure can be explained by
pointing at the right log.
"""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import socket
import subprocess
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from imexdra.common.errors import DriverError
from imexdra_sim.waiting import poll

log = structlog.get_logger(__name__)


class ClusterStartError(DriverError):
    """A cluster process failed to start or to become ready."""


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def tail(path: Path, lines: int = 30) -> str:
    """Return the last ``lines`` lines of a log file, for error messages."""
    try:
        content = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(content[-lines:])


@dataclass
class ManagedProcess:
    """One child process and its log file."""

    name: str
    argv: list[str]
    log_path: Path
    popen: subprocess.Popen[bytes]

    def alive(self) -> bool:
        """Tell whether the process is still running."""
        return self.popen.poll() is None

    def stop(self, grace: float = 10.0) -> None:
        """Terminate the whole process group, killing it after ``grace`` seconds."""
        if self.popen.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                # SIGKILLed but not yet reaped (seen at load 300+, in a cgroup write): it dies without
                # us, and raising here would leave every child stopped after this one running.
                log.warning("child not gone 10 s after SIGKILL", name=self.name, pid=self.popen.pid)

    def kill(self) -> None:
        """SIGKILL the whole process group at once (crash simulation)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(timeout=10)


@dataclass
class Supervisor:
    """Starts children with logs in ``log_dir`` and stops all of them, last started first."""

    log_dir: Path
    processes: list[ManagedProcess] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False, compare=False)
    """Nodes start concurrently (``LocalCluster._start_nodes``): guards ``processes``."""

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        pass_fds: Sequence[int] = (),
    ) -> ManagedProcess:
        """Start ``argv`` in a new session with stdout and stderr going to ``<log_dir>/<name>.log``.

        ``pass_fds`` stay open in the child (e.g. a lock it should hold for as long as it lives).
        """
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / f"{name}.log"
        with log_path.open("ab") as log:
            popen = subprocess.Popen(
                list(argv),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, **(env or {})},
                pass_fds=tuple(pass_fds),
            )
        process = ManagedProcess(name, list(argv), log_path, popen)
        with self._lock:
            self.processes.append(process)
        return process

    def restart(self, process: ManagedProcess) -> ManagedProcess:
        """SIGKILL ``process`` (if still running) and start its argv again in its place.

        The new child keeps the name, appends to the same log and takes the old one's place in the
        stop order; extra ``env`` and ``pass_fds`` of the first start are not repeated.
        """
        process.kill()
        started = self.start(process.name, process.argv)
        with self._lock:
            self.processes.remove(started)
            self.processes[self.processes.index(process)] = started
        return started

    def forget(self, process: ManagedProcess) -> None:
        """Stop tracking ``process``, which must have exited (a powered-off node's, restarted anew)."""
        if process.alive():
            raise ValueError(f"{process.name} is still running")
        with self._lock:
            if process in self.processes:
                self.processes.remove(process)

    def stop_all(self) -> None:
        """Stop every child, newest first, so clients go before the servers they talk to."""
        with self._lock:
            processes, self.processes = self.processes, []
        for process in reversed(processes):
            process.stop()


def children(pid: int) -> list[int]:
    """The direct children of ``pid`` (every thread's), or ``[]`` once it is gone."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                found += [int(c) for c in (task / "children").read_text().split()]
    return found


def kill_trees(roots: Iterable[int]) -> list[int]:
    """SIGKILL ``roots`` and all their descendants as one event, as a machine losing power does.

    Every process is SIGSTOPped before its children are listed, so none can fork past the walk or see
    a sibling die and react (a kubelet noticing its runtime go, a shim reaping its container); only
    then is each one SIGKILLed. Returns the PIDs killed. Processes that reparented themselves away from
    the roots (containerd's shims) are not found here: pass them as roots.
    """
    stopped: list[int] = []
    seen: set[int] = set()
    pending = list(roots)
    while pending:
        pid = pending.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            os.kill(pid, signal.SIGSTOP)
        except ProcessLookupError:
            continue
        stopped.append(pid)
        pending.extend(children(pid))
    for pid in stopped:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return stopped


def wait_until(
    what: str,
    check: Callable[[], bool],
    *,
    timeout: float,
    process: ManagedProcess | None = None,
    interval: float = 0.2,
) -> None:
    """Poll ``check`` until it is true; fail early, with the log's tail, if ``process`` dies.

    A check that raises counts as "not yet": the probes ask servers that are still starting.
    """
    poll(
        what,
        check,
        within=timeout,
        interval=interval,
        tolerate=(Exception,),
        require=None if process is None else functools.partial(_require_alive, process, what),
        explain=None if process is None else lambda: f"; see {process.log_path}:\n{tail(process.log_path)}",
    )


def _require_alive(process: ManagedProcess, what: str) -> None:
    if not process.alive():
        raise ClusterStartError(
            f"{process.name} exited with {process.popen.returncode} while waiting for {what}; "
            f"last log lines ({process.log_path}):\n{tail(process.log_path)}"
        )


def exit_on_sigterm() -> None:
    """Make SIGTERM raise ``SystemExit`` in this process, unless someone already handles it.

    The cluster's processes run in sessions of their own, so they outlive an owner that dies of a
    plain SIGTERM (``kill``, ``timeout``, a CI runner): Python's default action skips every ``with``
    block, and a leftover cluster holds ports, the MPI Operator's host-wide lock and memory. As
    ``SystemExit`` the signal unwinds ``with LocalCluster(...)``, which stops them.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _raise_system_exit)


def _raise_system_exit(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)
