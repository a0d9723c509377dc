"""Run the kubelet plugin with the steps of a prepare timed from inside (``prepare_bench --step-timing``).

Started as ``<runtime venv>/bin/python bench/steptiming.py <record file>`` in place of the
``compute-domain-kubelet-plugin`` entry point: it wraps a few of the plugin's coroutine methods so that
each call appends ``<step> <start> <end>`` (``time.perf_counter`` seconds) to the record file, then
runs the plugin's own ``main``. Nothing in the plugin knows about it: the wrapping happens here, in
bench code, on the classes the installed wheel provides.

``steps`` reads a record file back into per-prepare step durations: within each ``prepare`` (the
whole gRPC call as the plugin's service sees it) the API GET of the claim, the checkpoint writes
(PrepareStarted, then PrepareCompleted), the node label Update, the CDI spec write, and the
remainder, which is the plugin's other work (locking, checks, logging, building the response).
"""

from __future__ import annotations

import functools
import importlib
import statistics
import sys
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TextIO

#: (class path, method, step name). ``prepare`` brackets one NodePrepareResources call.
TIMED = (
    ("imexdra.dra.nodeservice:DraService", "prepare", "prepare"),
    ("imexdra.dra.nodeservice:DraService", "_fetch", "get_claim"),
    ("imexdra.kubeletplugin.devicestate:DeviceState", "_update", "checkpoint"),
    ("imexdra.kubeletplugin.devicestate:DeviceState", "_write_claim_spec", "cdi_spec"),
    ("imexdra.kubeletplugin.nodelabels:NodeLabeler", "add", "label_node"),
)
CHECKPOINT_STEPS = ("checkpoint_started", "checkpoint_completed")


def _timed(
    method: Callable[..., Coroutine[Any, Any, Any]], step: str, out: TextIO
) -> Callable[..., Coroutine[Any, Any, Any]]:
    @functools.wraps(method)
    async def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await method(*args, **kwargs)
        finally:
            out.write(f"{step} {started:.6f} {time.perf_counter():.6f}\n")

    return timed


def install(record: Path) -> None:
    """Wrap the ``TIMED`` methods so that each call is appended to ``record``."""
    out = record.open("a", buffering=1, encoding="ascii")
    for target, name, step in TIMED:
        module, _, cls_name = target.partition(":")
        cls = getattr(importlib.import_module(module), cls_name)
        setattr(cls, name, _timed(getattr(cls, name), step, out))


def steps(record: Path) -> dict[str, float]:
    """The p50 of each step of a prepare, in ms, with ``other`` = the whole call minus its steps.

    Calls that fetched no claim (no ``get_claim`` inside: the bench's empty calls) are left out.
    """
    rows: list[tuple[str, float, float]] = []
    for line in record.read_text(encoding="ascii").splitlines():
        step, begin, end = line.split()
        rows.append((step, float(begin), float(end)))
    durations: dict[str, list[float]] = {}
    for step, started, ended in rows:
        if step != "prepare":
            continue
        inside = [row for row in rows if row[0] != "prepare" and started <= row[1] and row[2] <= ended]
        if not any(row[0] == "get_claim" for row in inside):
            continue  # a call without claims (the bench's gRPC floor)
        checkpoints = 0
        parts = {"prepare": (ended - started) * 1e3}
        for name, first, last in sorted(inside, key=lambda row: row[1]):
            if name == "checkpoint":  # a prepare writes PrepareStarted, then PrepareCompleted
                name = CHECKPOINT_STEPS[min(checkpoints, 1)]
                checkpoints += 1
            parts[name] = parts.get(name, 0.0) + (last - first) * 1e3
        parts["other"] = parts["prepare"] - sum(v for k, v in parts.items() if k != "prepare")
        for key, value in parts.items():
            durations.setdefault(key, []).append(value)
    return {key: round(statistics.median(values), 3) for key, values in durations.items()}


def main() -> None:
    install(Path(sys.argv[1]))
    from imexdra.kubeletplugin.main import main as plugin_main

    sys.argv = ["compute-domain-kubelet-plugin"]
    plugin_main()


if __name__ == "__main__":
    main()
