"""Counting an object's writes as a client sees them: every resourceVersion a ``kubectl --watch`` shows.

Tests that promise "no write storm" bound these counts over a window (e.g. while a node is lost); each
write is kept whole, so a bound that fails says what every write changed (``describe``).
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from imexdra_sim.localcluster.cluster import LocalCluster
from tests.support.waiting import wait_until

#: Fields every write changes, or that say nothing about why it was made.
_BOOKKEEPING = ("metadata.resourceVersion", "metadata.managedFields", "metadata.generation")


@dataclass(frozen=True)
class Write:
    """One version of one object, as the watch delivered it."""

    event: str
    name: str
    version: str
    changed: tuple[str, ...]
    """``path: old -> new`` for each leaf that differs from the previous version of the object seen."""
    at: float
    """``time.monotonic()`` when the watch delivered it."""


def _leaves(value: Any, path: str = "") -> dict[str, Any]:
    """Flatten ``value`` into ``dotted.path[key] -> scalar``; a list item is keyed by its node name, name
    or type (a condition) if it has one, else by its position."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_leaves(item, f"{path}.{key}" if path else key))
        return out
    if isinstance(value, list):
        out = {}
        for i, item in enumerate(value):
            key = (
                next((item[k] for k in ("nodeName", "name", "type") if k in item), i)
                if isinstance(item, dict)
                else i
            )
            out.update(_leaves(item, f"{path}[{key}]"))
        return out
    return {path: value}


def _changed(old: dict[str, Any] | None, new: dict[str, Any]) -> tuple[str, ...]:
    before, after = _leaves(old or {}), _leaves(new)
    differ = (p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
    paths = sorted(p for p in differ if not p.startswith(_BOOKKEEPING))
    return tuple(f"{p}: {before.get(p)!r} -> {after.get(p)!r}" for p in paths)


class WriteCounter:
    """Watches ``kind`` (one object by ``name``, or all in ``namespace``) and records each version seen.

    Use as a context manager around the window: ``writes()`` are the creates, updates and deletes
    after the objects that existed when it was entered.
    """

    def __init__(self, cluster: LocalCluster, kind: str, namespace: str, name: str | None = None) -> None:
        self._cluster = cluster
        self._target = [kind, *([name] if name else []), "-n", namespace]
        self.seen: list[Write] = []
        """Every version in the order the watch delivered them (a watch may repeat one)."""
        self._start = 0
        self._lock = threading.Lock()

    def __enter__(self) -> WriteCounter:
        """Start watching; return once the watch has listed every object that exists now."""
        cluster = self._cluster
        assert cluster.binaries is not None
        existing = len(cluster.kubectl("get", *self._target, "-o", "name").stdout.split())
        argv = [str(cluster.binaries.path("kubectl")), f"--kubeconfig={cluster.kubeconfig}", "get"]
        argv += [*self._target, "--watch", "--output-watch-events", "-o", "json"]
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
        """Decode the watch's stream of JSON events (indented, one after another) as they arrive."""
        assert self._process.stdout is not None
        decoder = json.JSONDecoder()
        latest: dict[str, dict[str, Any]] = {}
        buffer = ""
        for line in self._process.stdout:
            buffer = (buffer + line).lstrip()
            try:
                event, end = decoder.raw_decode(buffer)
            except json.JSONDecodeError:
                continue  # an event not complete yet (kubectl ends each one with a line break)
            buffer = buffer[end:]
            obj = event.get("object", {})
            meta = obj.get("metadata", {})
            name = meta.get("name", "")
            version, changed = meta.get("resourceVersion", ""), _changed(latest.get(name), obj)
            write = Write(event.get("type", ""), name, version, changed, time.monotonic())
            latest[name] = obj
            with self._lock:
                self.seen.append(write)

    def _count(self) -> int:
        with self._lock:
            return len(self.seen)

    def writes(self) -> list[Write]:
        """The events since the watch began carrying a version not seen before (a watch may repeat one)."""
        with self._lock:
            known = {write.version for write in self.seen[: self._start]}
            return [write for write in self.seen[self._start :] if write.version not in known]

    def describe(self) -> str:
        """The writes, one paragraph each: when (from the first), event, object, version, what changed."""
        writes = self.writes()
        start = writes[0].at if writes else 0.0
        paragraphs = []
        for w in writes:
            changes = "".join(f"\n    {change}" for change in w.changed)
            paragraphs.append(f"+{w.at - start:.1f} s {w.event} {w.name} @{w.version}:{changes}")
        return "\n".join(paragraphs)
