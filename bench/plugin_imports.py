"""What the kubelet plugin's imports cost in RSS, one library after another, in the benchmarks' runtime venv.

A fresh interpreter of the runtime venv (``runtimevenv``: the wheel and its pins, as the image has
them) imports the libraries the plugin loads in a fixed order and reads its VmRSS after each, then
imports the plugin's entry module (``imexdra.kubeletplugin.main``: our modules and whatever they pull
in beyond the list). Each step's figure is what it added over the steps before it, so a library
shared by two steps counts at the first. ``--runs`` fresh interpreters; the JSON has every run and the
median per step.

    flock /tmp/imexdra-heavy.lock .venv/bin/python bench/plugin_imports.py --runs 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
from pathlib import Path
from typing import Any

from runtimevenv import runtime_venv

ROOT = Path(__file__).resolve().parents[1]
#: In the order the plugin's own imports reach them (asyncio brings ssl, and with it OpenSSL).
STEPS = (
    "asyncio",
    "msgspec",
    "structlog",
    "google.protobuf",
    "grpclib.server",
    "httpx2",
    "lightkube",
    "prometheus_client",
    "pynvml",
    "click",
    "imexdra.kubeletplugin.main",
)

_CHILD = """
import importlib, json, sys
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
steps = [("interpreter", rss())]
for name in sys.argv[1:]:
    importlib.import_module(name)
    steps.append((name, rss()))
print(json.dumps({"steps": steps, "grpc_loaded": "grpc" in sys.modules}))
"""


def one_run(python: Path) -> dict[str, Any]:
    """RSS after each step in one fresh interpreter, and what each step added."""
    out = subprocess.run([str(python), "-c", _CHILD, *STEPS], capture_output=True, text=True, check=True)
    report = json.loads(out.stdout)
    steps = report["steps"]
    added = {
        name: round(mib - steps[i - 1][1], 2) if i else round(mib, 2) for i, (name, mib) in enumerate(steps)
    }
    return {
        "rss_after_mib": {name: round(mib, 2) for name, mib in steps},
        "added_mib": added,
        "grpc_loaded": report["grpc_loaded"],
    }


def main() -> None:
    """``--runs`` interpreters; every run and the medians."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--output", type=Path, default=ROOT / "bench/results/plugin_imports.json")
    args = parser.parse_args()
    python = runtime_venv() / "bin" / "python"
    runs = [one_run(python) for _ in range(args.runs)]
    names = list(runs[0]["added_mib"])
    result = {
        "runs_count": args.runs,
        "commit": subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip(),
        "median_added_mib": {n: statistics.median(r["added_mib"][n] for r in runs) for n in names},
        "median_total_mib": statistics.median(r["rss_after_mib"][names[-1]] for r in runs),
        "grpc_loaded": any(r["grpc_loaded"] for r in runs),
        "runs": runs,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=1))


if __name__ == "__main__":
    main()
