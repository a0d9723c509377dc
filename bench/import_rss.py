"""Where each component's resident memory goes before it does any work: RSS added by each import.

The controller and the kubelet plugin are compared with upstream's Go binaries on idle RSS
(bench/README.md), and most of ours is paid at import, before the first API request. This bench
starts each entry point's module from the runtime venv (``runtimevenv``: what the image installs)
in a fresh interpreter and imports it in layers — the interpreter itself, ``asyncio`` (which loads
``ssl`` and OpenSSL), every third-party top-level package the entry point loads, in the order it first
loads them (a namespace package by its sub-packages, e.g. ``google.protobuf``, whose generated
modules' runtime then counts with ours; what the venv's ``.pth`` files load at start-up is left
out), then our own package — reading ``VmRSS`` after each. A package's figure is what it adds
on top of the layers before it, so a library shared by two packages counts for the first. The
layers are found, not listed: a first interpreter imports the entry point and reports which
top-level packages from outside the standard library it loaded.

Usage: ``python bench/import_rss.py [--runs 5]`` → ``bench/results/import_rss.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
from pathlib import Path
from typing import Any

from benchlib import RESULTS, RUNTIME_BIN
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex
from matplotlib.figure import Figure

#: The processes a node or the control plane runs, by their entry modules (pyproject's scripts).
ENTRY_POINTS = {
    "controller": "imexdra.controller.main",
    "kubelet plugin": "imexdra.kubeletplugin.main",
    "daemon": "imexdra.daemon.main",
}

#: Run in the runtime venv: the top-level non-stdlib packages the entry module loads, in load order.
_FIND_LAYERS = """
import sys, importlib
at_start = set(sys.modules)
importlib.import_module(sys.argv[1])
seen = []
for name in list(sys.modules):
    top = name.partition(".")[0]
    module = sys.modules.get(top)
    where = getattr(module, "__file__", None)
    if where is None and name.count(".") == 1:  # a namespace package: its sub-package is the layer
        top, where = name, getattr(sys.modules[name], "__file__", None)
    where = where or ""
    if top not in {*seen, *at_start} and top != "imexdra" and "site-packages" in where:
        seen.append(top)
print(" ".join(seen))
"""

#: Run in the runtime venv: VmRSS (kB) before anything, after each layer, as JSON.
_MEASURE = """
import importlib, json, sys
def rss():
    with open("/proc/self/status") as status:
        return int(status.read().split("VmRSS:")[1].split()[0])
steps = [("interpreter", rss())]
for layer in sys.argv[1:]:
    importlib.import_module(layer)
    steps.append((layer, rss()))
print(json.dumps(steps))
"""


def _python(*args: str) -> str:
    return subprocess.run(
        [str(RUNTIME_BIN / "python"), "-c", *args], check=True, capture_output=True, text=True
    ).stdout


def measure(entry: str, runs: int) -> dict[str, Any]:
    """Every run's RSS steps for one entry module, and each layer's median increment in MiB."""
    layers = ["asyncio", *_python(_FIND_LAYERS, entry).split(), entry]
    samples = []
    for _ in range(runs):
        steps = json.loads(_python(_MEASURE, *layers))
        samples.append({name: kb for name, kb in steps})
    names = ["interpreter", *layers]
    added = {}
    for index, name in enumerate(names):
        previous = names[index - 1] if index else None
        added[name] = round(
            statistics.median((run[name] - (run[previous] if previous else 0)) / 1024 for run in samples),
            2,
        )
    return {
        "entry_module": entry,
        "layers": names,
        "runs_kib": samples,
        "added_mib_median": added,
        "total_mib_median": round(statistics.median(run[entry] for run in samples) / 1024, 2),
    }


#: Layers adding less than this are drawn together as one "smaller layers" segment.
_SMALL_MIB = 0.3


def write_plot(results: dict[str, Any], path: Path) -> None:
    """One horizontal bar per component, stacked by layer (each layer's median increment)."""
    components = results["components"]
    figure = Figure(figsize=(12, 1.4 + 1.0 * len(components)), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots()
    colours: dict[str, str] = {}
    for row, result in enumerate(components.values()):
        segments: dict[str, float] = {}
        for layer, mib in result["added_mib_median"].items():
            label = "imexdra" if layer == result["entry_module"] else layer
            label = label if mib >= _SMALL_MIB else f"smaller layers (< {_SMALL_MIB} MiB each)"
            segments[label] = segments.get(label, 0.0) + mib
        left = 0.0
        for label, mib in segments.items():
            colour = colours.setdefault(label, _COLOURS[len(colours) % len(_COLOURS)])
            axes.barh(row, mib, left=left, color=colour, edgecolor="white", label=label)
            if mib >= 1.2:
                axes.text(left + mib / 2, row, f"{mib:.1f}", ha="center", va="center", fontsize=8)
            left += mib
        axes.text(left, row, f" {result['total_mib_median']:g} MiB", va="center", fontsize=9)
    axes.set_yticks(range(len(components)), list(components))
    axes.invert_yaxis()
    axes.set_xlabel("RSS after import, MiB (median of runs; each layer = what it adds to those before it)")
    axes.set_title(f"Resident memory by import layer, runtime venv, {results['runs']} runs each")
    handles, labels = axes.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    figure.legend(unique.values(), unique.keys(), loc="outside right center", fontsize=8)
    figure.savefig(path)


#: Twenty distinct colours, one per layer label across all bars.
_COLOURS = [to_hex(colormaps["tab20"](index)) for index in range(20)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh interpreters per component")
    args = parser.parse_args()
    results = {
        "runs": args.runs,
        "components": {name: measure(entry, args.runs) for name, entry in ENTRY_POINTS.items()},
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "import_rss.json").write_text(json.dumps(results, indent=1))
    write_plot(results, RESULTS / "import_rss.png")
    for name, result in results["components"].items():
        print(name, result["total_mib_median"], "MiB:", result["added_mib_median"])


if __name__ == "__main__":
    main()
