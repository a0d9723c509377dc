"""A ComputeDomain controller as a child process: the one runner of the integration tests and the benchmarks.

``ControllerProcess`` owns the process's life (start and restart appending to one log, SIGKILL, SIGTERM
and stop, alive), its HTTP endpoint (``/readyz``, ``/metrics``) and its log. What it runs is its
subclass's: the tests' ``ControllerUnderTest`` runs our binary under a ServiceAccount with only the
controller's RBAC (``tests/integration/controller_harness.py``), the benchmarks' ``BenchController``
runs any implementation from a ``--controller-command`` template (``bench/benchlib.py``).
"""

from __future__ import annotations

import abc
import contextlib
import json
import signal
import subprocess
import urllib.request
from pathlib import Path
from typing import Any, Self

from imexdra_sim.localcluster.processes import tail
from imexdra_sim.promtext import Samples, parse_metrics
from imexdra_sim.waiting import poll_async


class ControllerError(RuntimeError):
    """The controller exited while something needed it, or its endpoint did not answer."""


class ControllerProcess(abc.ABC):
    """One controller child process; a subclass sets ``name``, ``port``, ``log_path`` and what to run."""

    #: What the messages call it (the tests: also its pod name and log name).
    name: str
    #: The port on 127.0.0.1 its ``--http-endpoint`` listens on.
    port: int
    #: Where its stdout and stderr go, appended across restarts.
    log_path: Path
    #: ``wait_ready`` holds once any of these paths answers 200.
    ready_paths: tuple[str, ...] = ("/readyz",)
    popen: subprocess.Popen[bytes] | None = None
    #: How many times ``start`` ran: each start is marked in the log (``--- start <n> ---``).
    starts: int = 0

    @abc.abstractmethod
    def argv(self) -> list[str]:
        """The command line of the next start (read at every start, so a restart may change it)."""

    @abc.abstractmethod
    def environment(self) -> dict[str, str]:
        """The whole environment of the next start."""

    def start(self) -> Self:
        """Start (or, once stopped or killed, restart) the process, appending to its log.

        It runs in a session of its own, so a Ctrl-C meant for the test run or the benchmark does not
        reach it before their teardown stops it.
        """
        assert not self.alive(), "already running"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            log.write(f"--- start {self.starts} ---\n".encode())
            self.popen = subprocess.Popen(
                self.argv(),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.environment(),
                start_new_session=True,
            )
        self.starts += 1
        return self

    @property
    def pid(self) -> int:
        assert self.popen is not None, "not started"
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill(self) -> None:
        """SIGKILL: no cleanup, no lease release, writes cut off wherever they were."""
        if self.popen is not None and self.alive():
            self.popen.kill()
            self.popen.wait(timeout=10)

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM and wait (SIGKILL after ``timeout``); return the exit code (None if never started)."""
        if self.popen is None:
            return None
        if self.alive():
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(timeout=10)
        return self.popen.returncode

    def get(self, path: str) -> tuple[int, str]:
        """GET ``path`` of its HTTP endpoint: (status, body), or (0, the error) when nothing answers."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as response:
                return int(response.status), response.read().decode()
        except OSError as error:
            return getattr(error, "code", 0) or 0, str(error)

    def ready(self) -> bool:
        return any(self.get(path)[0] == 200 for path in self.ready_paths)

    def require_alive(self) -> None:
        """Raise ``ControllerError`` (with its log's end) unless the process runs: a wait's ``require``."""
        if not self.alive():
            code = self.popen.returncode if self.popen is not None else None
            raise ControllerError(
                f"{self.name} exited with {code}; its log {self.log_path} ends:\n{self.log_tail()}"
            )

    async def wait_ready(self, within: float = 60.0) -> None:
        """Until ``ready`` (for ours: the caches are filled and the workers run); fail early if it exits."""
        await poll_async(
            f"{self.name} ready ({' or '.join(self.ready_paths)} answering 200)",
            self.ready,
            within=within,
            interval=0.1,
            require=self.require_alive,
            explain=lambda: f"; its log {self.log_path} ends:\n{self.log_tail()}",
        )

    def metrics(self) -> Samples:
        """Every sample of its /metrics, by (name, sorted labels); raises unless /metrics answers 200."""
        status, text = self.get("/metrics")
        if status != 200:
            raise ControllerError(f"{self.name}'s /metrics answered {status}: {text}")
        return parse_metrics(text)

    def log_tail(self, lines: int = 40) -> str:
        return tail(self.log_path, lines)

    def log_events(self) -> list[dict[str, Any]]:
        """The JSON log lines written so far (across restarts)."""
        events = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                events.append(json.loads(line))
        return events
