"""The test suite's wall time in lanes (``make test``): the ``lanes.json`` of CI runs, side by side.

Not a benchmark that runs anything itself: each run is ``.ci/run`` on a clean clone (``git clone``,
then ``flock /tmp/imexdra-heavy.lock env CI=true bash .ci/run``), which leaves its lanes' figures in
``<clone>/build/test-lanes/lanes.json`` (tools/testlanes.py). This gathers those files, with the
commit each clone ran, into ``bench/results/suite_times.json`` and a plot of every lane's seconds
per run beside the serial baseline (docs/testing.md, "Lanes").

Usage: ``python bench/suite_times.py CLONE [CLONE...] [--ci-time CLONE SECONDS cold|cached ...]``: the
runs already in ``suite_times.json`` are kept (a clone's run replaces an earlier one of the same
commit and wall time); ``--ci-time`` records the whole ``.ci/run`` of a clone (venv, lint, builds and
lanes), with the build cache it started from: ``cold`` (a fresh machine's: nothing built, no Go module
or pip cache) or ``cached``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
#: The serial baseline: the last CI run of the one-process ``make test`` (a clean clone on a fresh
#: two-core machine) at commit 03d04bc, and the pytest time of the serial run before it (issue 41).
SERIAL_PYTEST_SECONDS = 36 * 60 + 38
BASELINE: dict[str, Any] = {
    "commit": "03d04bc",
    "ci_seconds": 2268,
    "earlier_pytest_seconds": SERIAL_PYTEST_SECONDS,
    "what": "make test before the lanes: lint, then pytest tests in one process (make test, one process)",
}


def run_of(clone: Path) -> dict[str, Any]:
    """One clone's run: its commit and its lanes.json."""
    commit = subprocess.run(
        ["git", "-C", str(clone), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    lanes: dict[str, Any] = json.loads((clone / "build" / "test-lanes" / "lanes.json").read_text())
    tests = sum(lane["outcomes"].get("tests", 0) for lane in lanes["lanes"].values())
    return {"clone": str(clone), "commit": commit, "tests": tests, **lanes}


def kept_runs() -> list[dict[str, Any]]:
    """The runs ``suite_times.json`` already holds (none if there is no such file)."""
    path = RESULTS / "suite_times.json"
    if not path.exists():
        return []
    runs: list[dict[str, Any]] = json.loads(path.read_text())["runs"]
    return runs


def kept_times() -> dict[str, Any]:
    """The serial baseline's ``--times-json`` files ``suite_times.json`` already holds."""
    path = RESULTS / "suite_times.json"
    times: dict[str, Any] = json.loads(path.read_text())["baseline"]["times"] if path.exists() else {}
    return times


def kept_notes() -> list[str]:
    """The notes ``suite_times.json`` already holds, about its earlier runs."""
    path = RESULTS / "suite_times.json"
    notes: list[str] = json.loads(path.read_text())["notes"] if path.exists() else []
    return notes


def write_plot(results: dict[str, Any], path: Path) -> None:
    """Each run's lanes as bars of seconds, the serial baseline as a dashed line."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(8.0, 4.8), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots()
    runs = results["runs"]
    names = sorted({name for run in runs for name in run["lanes"]})
    width = 0.8 / max(len(names), 1)
    for index, name in enumerate(names):
        xs = [i + index * width for i in range(len(runs))]
        ys = [run["lanes"].get(name, {}).get("seconds", 0.0) for run in runs]
        axes.bar(xs, ys, width, label=name)
    axes.plot(
        [i + 0.4 - width / 2 for i in range(len(runs))],
        [run["wall_seconds"] for run in runs],
        "ko",
        label="all lanes (wall)",
    )
    axes.axhline(SERIAL_PYTEST_SECONDS, color="tab:gray", linestyle="--", label="serial pytest")
    axes.axhline(SERIAL_PYTEST_SECONDS / 2, color="tab:red", linestyle="--", label="target (half)")
    axes.set_xticks([i + 0.4 - width / 2 for i in range(len(runs))], [run["commit"][:7] for run in runs])
    axes.set_ylabel("seconds")
    axes.set_title("make test: seconds per lane (lanes of one phase run at once)")
    axes.legend(fontsize=8)
    figure.savefig(path, dpi=100)


def main() -> None:
    """Gather the clones' runs; write the JSON and the plot; print the JSON."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("clones", nargs="+", type=Path, help="clones that ran .ci/run")
    parser.add_argument("--note", action="append", default=[], help="a line saying what the runs show")
    parser.add_argument(
        "--before-times",
        action="append",
        default=[],
        type=Path,
        help="a --times-json file of the serial suite (per tier and module), kept with the baseline",
    )
    parser.add_argument(
        "--ci-time",
        action="append",
        default=[],
        nargs=3,
        metavar=("CLONE", "SECONDS", "BUILDS"),
        help="the clone's whole .ci/run in seconds, and whether its builds started cold or cached",
    )
    args = parser.parse_args()
    ci_times = {Path(clone).resolve(): (float(seconds), builds) for clone, seconds, builds in args.ci_time}
    if unknown := {b for _, b in ci_times.values()} - {"cold", "cached"}:
        parser.error(f"--ci-time: BUILDS is cold or cached, not {', '.join(sorted(unknown))}")
    runs = kept_runs()
    for clone in args.clones:
        run = run_of(clone)
        if (seconds_builds := ci_times.get(clone.resolve())) is not None:
            run["ci_seconds"], run["builds"] = seconds_builds
        runs = [r for r in runs if (r["commit"], r["wall_seconds"]) != (run["commit"], run["wall_seconds"])]
        runs.append(run)
    before = {str(path): json.loads(path.read_text()) for path in args.before_times} or kept_times()
    results = {
        "baseline": {**BASELINE, "times": before},
        "runs": runs,
        "median_wall_seconds": statistics.median(run["wall_seconds"] for run in runs),
        "notes": kept_notes() + args.note,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "suite_times.json").write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
    write_plot(results, RESULTS / "suite_times.png")
    print(json.dumps({k: v for k, v in results.items() if k != "runs"}, indent=1))


if __name__ == "__main__":
    main()
