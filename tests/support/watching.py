"""Counting an object's writes as a client sees them: every resourceVersion a ``kubectl --watch`` shows.

Tests that promise "no write storm" bound these counts over a window (e.g. while a node is lost).
"""

from __future__ import annotations

import subprocess
import threading
from types import TracebackType

from imexdra_sim.localcluster.cluster import LocalCluster
from tests.support.waiting import wait_until


class WriteCounter:
    """Watches ``kind`` (one object by ``name``, or all in ``namespace``) and records each version seen.

    Use as a context manager around the window: ``writes()`` are the creates, updates and deletes
    after the objects that existed when it was entered.
    """

    def __init__(self, cluster: LocalCluster, kind: str, namespace: str, name: str | None = None) -> None:
        self._cluster = cluster
        self._target = [kind, *([name] if name else []), "-n", namespace]
        self.seen: list[tuple[str, str, str]] = []
        """``(event type, object name, resourceVersion)`` in the order the watch delivered them."""
        self._start = 0
        self._lock = threading.Lock()

    def __enter__(self) -> WriteCounter:
        """Start watching; return once the watch has listed every object that exists now."""
        cluster = self._cluster
        assert cluster.binaries is not None
        existing = len(cluster.kubectl("get", *self._target, "-o", "name").stdout.split())
        fields = "{.type} {.object.metadata.name} {.object.metadata.resourceVersion}{'\\n'}"
        argv = [str(cluster.binaries.path("kubectl")), f"--kubeconfig={cluster.kubeconfig}", "get"]
        argv += [*self._target, "--watch", "--output-watch-events", "-o", f"jsonpath={fields}"]
        self._process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        wait_until(
            f"the watch on {' '.join(self._target)} listing {existing}", lambda: self._count() >= existing
        )
        self._start = existing
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Stop watching."""
        self._process.kill()
        self._process.wait(timeout=10)
        self._reader.join(timeout=10)

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            parts = line.split()
            if len(parts) == 3:
                with self._lock:
                    self.seen.append((parts[0], parts[1], parts[2]))

    def _count(self) -> int:
        with self._lock:
            return len(self.seen)

    def writes(self) -> list[tuple[str, str, str]]:
        """The events since the watch began carrying a version not seen before (a watch may repeat one)."""
        with self._lock:
            known = {version for _, _, version in self.seen[: self._start]}
            return [event for event in self.seen[self._start :] if event[2] not in known]
