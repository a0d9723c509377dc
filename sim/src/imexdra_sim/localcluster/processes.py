"""Starting, watching and stopping the local cluster's processes.

Every child runs in its own session (process group) with its output in ``<logs>/<name>.log``, so
teardown can kill a child together with everything it started, and a failure can be explained by
pointing at the right log.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from imexdra.common.errors import DriverError


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
            self.popen.wait(timeout=10)

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

    def stop_all(self) -> None:
        """Stop every child, newest first, so clients go before the servers they talk to."""
        with self._lock:
            processes, self.processes = self.processes, []
        for process in reversed(processes):
            process.stop()


def wait_until(
    what: str,
    check: Callable[[], bool],
    *,
    timeout: float,
    process: ManagedProcess | None = None,
    interval: float = 0.2,
) -> None:
    """Poll ``check`` until it is true; fail early, with the log's tail, if ``process`` dies."""
    deadline = time.monotonic() + timeout
    while True:
        if process is not None and not process.alive():
            raise ClusterStartError(
                f"{process.name} exited with {process.popen.returncode} while waiting for {what}; "
                f"last log lines ({process.log_path}):\n{tail(process.log_path)}"
            )
        with contextlib.suppress(Exception):
            if check():
                return
        if time.monotonic() > deadline:
            hint = f"; see {process.log_path}:\n{tail(process.log_path)}" if process else ""
            raise ClusterStartError(f"timed out after {timeout:.0f}s waiting for {what}{hint}")
        time.sleep(interval)
