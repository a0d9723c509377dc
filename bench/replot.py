"""Draw a benchmark's plot again from its committed result file, without running the benchmark.

A plot is a function of its JSON (``plotting``); when the drawing changes, the committed PNGs beside
older results are redrawn from those results, so they still show exactly the numbers reported:

    python bench/replot.py controller bench/results/controller_bench_vs_upstream.json
    python bench/replot.py jobstart bench/results/jobstart_bench_vs_upstream.json

The PNG is written next to the JSON, under the same name.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from plotting import write_controller_plot, write_jobstart_plot

#: The targets each benchmark draws (controller_bench.py, jobstart_bench.py).
CONTROLLER_TARGETS = {"target_p50_ms": 100.0, "target_burst_s": 10.0}
JOBSTART_TARGETS_S = {18: 10.0, 256: 60.0}


def main() -> None:
    """Parse the arguments and redraw one plot."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("benchmark", choices=["controller", "jobstart"])
    parser.add_argument("results", type=Path, help="the benchmark's JSON result file")
    args = parser.parse_args()
    results = json.loads(args.results.read_text())
    png = args.results.with_suffix(".png")
    if args.benchmark == "controller":
        write_controller_plot(results, png, **CONTROLLER_TARGETS)
    else:
        targets = {int(size): target for size, target in results.get("targets_s", {}).items()}
        write_jobstart_plot(results, png, targets_s=targets or JOBSTART_TARGETS_S)
    print(png)


if __name__ == "__main__":
    main()
