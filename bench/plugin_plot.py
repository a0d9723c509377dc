"""The plot of ``plugin_bench.py``: the kubelet plugins side by side, on one node or pooled over many.

Apart from ``plotting`` (whose figure and CDF helpers it draws with) so that neither file outgrows
the other; like every plot, it takes the results as the bench writes them to its JSON file.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from plotting import OTHER_COLOUR, _cdf, _figure

PLUGIN_COLOURS = {"imexdra": "tab:blue", "upstream": OTHER_COLOUR}


def write_plugin_plot(results: dict[str, Any], path: Path) -> None:
    """The kubelet plugin through the kubelet, every plugin of the run, side by side.

    Prepare and unprepare per cycle, the prepare CDF, pod create → Running per cycle, idle CPU and RSS.
    Over several nodes (``by_node``): per cycle index the median over the nodes, the CDF over every
    node's cycles, and the bars the plugin's pooled figures (RSS and idle CPU the mean per process).
    """
    runs = results["plugins"]
    nodes = results.get("nodes", {}).get("count", 1)
    figure, (series, distribution, running, costs) = _figure(
        f"Kubelet plugin through the real kubelet, {results['mode']}, "
        f"{'one node' if nodes == 1 else f'{nodes} nodes at once'} "
        f"(upstream {(results.get('upstream_commit') or 'not run')[:8]})",
        panels=4,
    )
    per_cycle = "" if nodes == 1 else f", median of {nodes} nodes"
    for name, run in runs.items():
        colour = PLUGIN_COLOURS.get(name, "tab:purple")
        # One list of cycles per node (one node: the run's own), each node's in its order.
        by_node = [turn["cycles"] for turn in run.get("by_node", {}).values()] or [run["cycles"]]

        def median(key: str, by_node: list[list[dict[str, Any]]] = by_node) -> list[float]:
            return [statistics.median(c[key] for c in index) for index in zip(*by_node, strict=True)]

        prepare, unprepare, pod_running = (
            median("prepare_ms"),
            median("unprepare_ms"),
            median("pod_running_s"),
        )
        cycles = range(1, len(prepare) + 1)
        series.plot(
            cycles, prepare, marker=".", linewidth=1, color=colour, label=f"{name} prepare{per_cycle}"
        )
        series.plot(cycles, unprepare, linestyle=":", linewidth=1, color=colour, label=f"{name} unprepare")
        pooled = [cycle["prepare_ms"] for node in by_node for cycle in node]
        _cdf(
            distribution,
            pooled,
            "prepares",
            color=colour,
            label=f"{name} (p50 {run['prepare_ms']['p50']:g} ms)",
        )
        running.plot(
            cycles,
            pod_running,
            marker=".",
            linewidth=1,
            color=colour,
            label=f"{name} (p50 {run['pod_running_s']['p50']:g} s{per_cycle})",
        )
    series.set_yscale("log")
    series.set_title("Kubelet's NodePrepare/UnprepareResources per cycle")
    series.set_xlabel("cycle")
    series.set_ylabel("ms (dra_grpc_operations_duration_seconds, log)")
    distribution.set_xscale("log")
    distribution.set_xlabel("NodePrepareResources, ms (log)")
    distribution.set_title("Prepare distribution")
    running.set_ylim(bottom=0)
    running.set_title("Pod create → Running")
    running.set_xlabel("cycle")
    running.set_ylabel("seconds")
    names = list(runs)
    measures: tuple[tuple[str, Callable[[dict[str, Any]], float]], ...] = (
        ("idle RSS, MiB", lambda run: run["rss_mib"]["idle"]["VmRSS"]),
        ("peak RSS, MiB", lambda run: run["rss_mib"]["after_cycles"]["VmHWM"]),
        ("idle CPU, ms/s × 10", lambda run: run["idle_cpu_ms_per_s"] * 10),
        ("CPU per cycle p50, ms", lambda run: run["cpu_ms_per_cycle"]["p50"]),
    )
    width = 0.8 / max(1, len(names))
    for offset, name in enumerate(names):
        values = [value_of(runs[name]) for _, value_of in measures]
        bars = costs.bar(
            [m + offset * width for m in range(len(measures))],
            values,
            width=width,
            color=PLUGIN_COLOURS.get(name, "tab:purple"),
            label=name,
        )
        costs.bar_label(bars, fmt="%.1f", fontsize=7)
    costs.set_xticks(
        [m + width * (len(names) - 1) / 2 for m in range(len(measures))], [m for m, _ in measures]
    )
    costs.tick_params(axis="x", labelsize=7)
    costs.set_title("Memory and CPU" if nodes == 1 else "Memory and CPU (RSS, idle CPU: mean per process)")
    for axes in (series, distribution, running, costs):
        axes.legend(fontsize=8)
    figure.savefig(path, dpi=110)
