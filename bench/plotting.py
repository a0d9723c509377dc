"""The PNG plots of the benchmarks, drawn with matplotlib (the ``bench`` extra; ``make bench`` installs it).

Each plot function takes the results as the benchmark writes them to its JSON file, so a plot always
shows the numbers that were reported. Figures are rendered straight to PNG by the Agg canvas: no pyplot,
no global backend state and no display. Targets are dashed lines labelled with their value; measured
values are solid.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from stats import percentile

P50_COLOUR = "tab:green"
P99_COLOUR = "tab:red"
MODE_COLOURS = {"driver_managed": "tab:blue", "host_managed": "tab:orange"}
#: The controller compared with ours (``--controller-command``), drawn in grey wherever it appears.
OTHER_COLOUR = "tab:gray"


def other_name(results: dict[str, Any]) -> str:
    """What the compared controller is: upstream's (bench/upstream.sh) or another one."""
    command = results.get("controller_command") or (results.get("other_controller") or {}).get(
        "controller_command"
    )
    if results.get("upstream_commit"):
        return f"upstream's controller ({results['upstream_commit'][:8]})"
    return "upstream's controller" if "upstream" in str(command or "") else "other controller"


def _figure(title: str, panels: int) -> tuple[Figure, list[Axes]]:
    figure = Figure(figsize=(6.0 * panels, 4.8), layout="constrained")
    FigureCanvasAgg(figure)
    figure.suptitle(title)
    return figure, list(figure.subplots(1, panels, squeeze=False)[0])


def _vertical(axes: Axes, x: float, label: str, colour: str, *, target: bool) -> None:
    """A vertical line at ``x``: a target labelled top-left of it, a measurement bottom-right.

    The data curves rise to the left of a measured value, so its label sits where they are not.
    """
    axes.axvline(x, color=colour, linestyle="--" if target else "-", linewidth=1.3)
    axes.text(
        x,
        0.98 if target else 0.02,
        f"{label} " if target else f" {label}",
        transform=axes.get_xaxis_transform(),
        rotation=90,
        color=colour,
        fontsize=9,
        va="top" if target else "bottom",
        ha="right" if target else "left",
        bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.7, "pad": 1},
    )


def _horizontal_target(axes: Axes, y: float, label: str, colour: str) -> None:
    axes.axhline(y, color=colour, linestyle="--", linewidth=1.3)
    axes.text(
        0.99,
        y,
        label,
        transform=axes.get_yaxis_transform(),
        color=colour,
        fontsize=9,
        va="bottom",
        ha="right",
    )


def _cdf(axes: Axes, samples: list[float], of: str, **style: Any) -> None:
    ordered = sorted(samples)
    fractions = [(rank + 1) / len(ordered) for rank in range(len(ordered))]
    axes.step(ordered, fractions, where="post", linewidth=1.8, **style)
    axes.set_ylim(0, 1.02)
    axes.set_ylabel(f"cumulative fraction of {of}")


def _count_curve(axes: Axes, times: list[float], **style: Any) -> None:
    """How many events had happened by each time: a step from 1 at the first to N at the last."""
    axes.step(times, range(1, len(times) + 1), where="post", **style)


def _ready_curve(
    axes: Axes, curve: list[float], all_ready: float, colour: str, label: str, *, linestyle: str = "-"
) -> tuple[float, int]:
    """A burst's domains Ready over time, its all-Ready line; returns (all Ready, domains)."""
    _count_curve(axes, curve, linewidth=1.8, linestyle=linestyle, color=colour, label=label)
    _vertical(axes, all_ready, f"all Ready {all_ready:g} s", colour, target=False)
    return all_ready, len(curve)


def percentile_of(samples: list[float], fraction: float = 0.5) -> float:
    """The ``fraction`` percentile of ``samples`` (nearest rank, as the benchmarks report), rounded."""
    return round(percentile(samples, fraction), 1)


def write_prepare_plot(results: dict[str, Any], path: Path) -> None:
    """Prepare latency per claim and its distribution, against the p50 and p99 targets."""
    samples = results["prepare_samples_ms"]
    measured, targets = results["prepare_ms"], results["targets_ms"]
    figure, (series, distribution) = _figure(
        f"NodePrepareResources over the gRPC socket: {len(samples)} claims "
        f"(p50 {measured['p50']:g} ms, p99 {measured['p99']:g} ms)",
        panels=2,
    )
    series.scatter(range(1, len(samples) + 1), samples, s=4, color="tab:blue", label="one prepare")
    # Limits by hand: both targets inside the axes with room for their labels, shared by both panels.
    low = min(*samples, targets["p50"]) / 1.5
    high = max(*samples, targets["p99"]) * 2
    series.set_yscale("log")
    series.set_ylim(low, high)
    series.set_title("Latency per claim")
    series.set_xlabel("claim # (in prepare order)")
    series.set_ylabel("latency (ms, log scale)")
    _horizontal_target(series, targets["p50"], f"target p50 ≤ {targets['p50']:g} ms", P50_COLOUR)
    _horizontal_target(series, targets["p99"], f"target p99 ≤ {targets['p99']:g} ms", P99_COLOUR)
    series.legend(loc="upper left")

    _cdf(distribution, samples, "claims", color="tab:blue", label="prepare")
    floor = results.get("api_floor_samples_ms")
    if floor:
        _cdf(distribution, floor, "claims", color="tab:gray", label="API floor: GET claim + label node")
    # The host-managed isolation comparison (prepare_isolation), when it ran.
    isolation = results.get("host_managed_isolation") or {}
    curves = (
        ("domain", "prepare_samples_ms", "host-managed, domain isolation", "tab:orange"),
        ("channel", "prepare_samples_ms", "host-managed, channel isolation", "tab:purple"),
        ("channel", "prepare_samples_ms_with_held", "channel isolation, claims held", "tab:pink"),
    )
    for key, field, label, colour in curves:
        extra = isolation.get(key, {}).get(field)
        if extra:
            _cdf(
                distribution,
                extra,
                "claims",
                color=colour,
                label=f"{label} (p50 {percentile_of(extra):g} ms)",
            )
            low, high = min(low, min(extra) / 1.5), max(high, max(extra) * 2)
    if floor or isolation:
        distribution.legend(loc="lower right", fontsize="small")
    distribution.set_xscale("log")
    distribution.set_xlim(low, high)
    distribution.set_title("Latency distribution (CDF)")
    distribution.set_xlabel("latency (ms, log scale)")
    marks = [
        (measured["p50"], "p50", P50_COLOUR, False),
        (measured["p99"], "p99", P99_COLOUR, False),
        (targets["p50"], "target p50", P50_COLOUR, True),
        (targets["p99"], "target p99", P99_COLOUR, True),
    ]
    for value, label, colour, target in marks:
        _vertical(distribution, value, f"{label} {value:g} ms", colour, target=target)
    figure.savefig(path, dpi=110)


def write_controller_plot(
    results: dict[str, Any], path: Path, *, target_p50_ms: float, target_burst_s: float
) -> None:
    """Single-domain latency per mode, the burst's Ready curve and API writes per domain lifecycle."""
    modes = {mode: results[f"single_{mode}"] for mode in MODE_COLOURS}
    curve = results["burst"]["ready_curve_s"]
    all_ready = results["burst"]["all_ready_s"]
    burst_mode = str(results["burst"].get("controller_mode", "host_managed")).replace("_", "-")
    # A side-by-side run (--controller-command): the other controller's driver-managed single domains,
    # burst and writes, in grey beside ours.
    other = results.get("other_controller")
    if other is not None and "single_driver_managed" not in other:
        other = None  # it failed; its error is in the JSON
    name = other_name(results)
    figure, (single, burst, writes) = _figure("ComputeDomain controller", panels=3)

    for mode, single_results in modes.items():
        p50 = single_results["create_to_ready_ms"]["p50"]
        label = f"{mode.replace('_', '-')} (p50 {p50:g} ms)"
        _cdf(single, single_results["samples_ms"], "domains", color=MODE_COLOURS[mode], label=label)
    slowest = max(max(single_results["samples_ms"]) for single_results in modes.values())
    if other is not None:
        theirs = other["single_driver_managed"]
        label = f"{name}, driver-managed (p50 {theirs['create_to_ready_ms']['p50']:g} ms)"
        _cdf(single, theirs["samples_ms"], "domains", color=OTHER_COLOUR, linestyle="--", label=label)
        slowest = max(slowest, max(theirs["samples_ms"]))
    single.set_xlim(0, max(slowest, target_p50_ms) * 1.1)
    single.set_title("Single domain: create → Ready (CDF)")
    single.set_xlabel("create → Ready (ms)")
    _vertical(single, target_p50_ms, f"target p50 ≤ {target_p50_ms:g} ms", P50_COLOUR, target=True)
    # Below the axes: inside, a legend can hide a curve or the target's label.
    single.legend(loc="upper center", bbox_to_anchor=(0.5, -0.15), ncols=2, frameon=False)

    colour = MODE_COLOURS.get(burst_mode.replace("-", "_"), "tab:orange")
    label = f"imexdra, domain isolation: {len(curve)} domains"
    ends = [_ready_curve(burst, curve, all_ready, colour, label)]
    if other is not None:
        their_curve = other["burst"]["ready_curve_s"]
        label = f"{name}: {len(their_curve)} domains"
        theirs = _ready_curve(
            burst, their_curve, other["burst"]["all_ready_s"], OTHER_COLOUR, label, linestyle="--"
        )
        ends.append(theirs)
    # Phase 4 (when it ran): the burst under channel isolation, each domain given its own channel.
    channel = results.get("burst_channel_isolation")
    if channel is not None:
        channel_curve = channel["ready_curve_s"]
        unique = "unique" if channel["channels"]["unique"] else "NOT unique"
        label = f"channel isolation: {len(channel_curve)} domains, channels {unique}"
        ends.append(_ready_curve(burst, channel_curve, channel["all_ready_s"], "tab:purple", label))
    latest, most = max(end for end, _ in ends), max(count for _, count in ends)
    if other is not None:  # minutes against seconds: a log axis keeps both curves readable
        burst.set_xscale("log")
        burst.set_xlim(0.1, max(latest, target_burst_s) * 1.5)
    else:
        burst.set_xlim(0, max(latest, target_burst_s) * 1.1)
    burst.set_ylim(0, most * 1.05)
    burst.set_title(f"Bursts of {burst_mode} domains")
    burst.set_xlabel("time since the first create (s)")
    burst.set_ylabel("domains Ready")
    _vertical(burst, target_burst_s, f"target all Ready ≤ {target_burst_s:g} s", P99_COLOUR, target=True)
    burst.legend(loc="upper center", bbox_to_anchor=(0.5, -0.15), ncols=1, frameon=False)

    names = [mode.replace("_", "-") for mode in modes]
    counts = [single_results["api_writes_per_lifecycle"] for single_results in modes.values()]
    colours = [MODE_COLOURS[mode] for mode in modes]
    if channel is not None:  # the burst's create → Ready plus its delete → gone, per domain
        names.append("host-managed,\nchannel isolation (burst)")
        counts.append(channel["api_writes_per_domain"] + channel["api_writes_per_domain_delete"])
        colours.append("tab:purple")
    if other is not None:
        names.append(f"{name},\ndriver-managed")
        # Counted by the API server (the other controller has no metric of its own writes).
        counts.append(other["single_driver_managed"]["apiserver_writes_per_lifecycle"])
        colours.append(OTHER_COLOUR)
    bars = writes.bar(names, counts, color=colours, width=0.5)
    writes.bar_label(bars, fmt="%g")
    writes.margins(y=0.15)
    writes.set_title("Controller API writes per domain lifecycle")
    writes.set_xlabel("mode (one lifecycle: create → Ready → delete → gone)")
    writes.set_ylabel("API writes per domain")
    figure.savefig(path, dpi=110)


SERIES_COLOURS = {
    "simulated": "tab:blue",
    "kubelets": "tab:orange",
    "simulated_driver_managed": "tab:green",
    "simulated_driver_managed_binding": "tab:purple",
}
STAGES = (
    ("domain_ready_s", "domain Ready"),
    ("all_pods_created_s", "all pods created"),
    ("all_claims_allocated_s", "all claims allocated"),
    ("all_pods_bound_s", "all pods bound"),
    ("all_prepared_s", "all prepared"),
)


def write_jobstart_plot(results: dict[str, Any], path: Path, *, targets_s: dict[int, float]) -> None:
    """Submit → all prepared per job size (with its stages), the prepared curves, the API requests."""
    figure, (scaling, curves, requests) = _figure(
        "Job start: submit → every worker's channel prepared", panels=3
    )
    runs = {series: [run for run in results.get(series, []) if "ours" in run] for series in SERIES_COLOURS}
    name = other_name(results)
    for series, series_runs in runs.items():
        if not series_runs:
            continue
        sizes = [run["nodes"] for run in series_runs]
        totals = [run["ours"]["submit_to_all_prepared_s"] for run in series_runs]
        colour = SERIES_COLOURS[series]
        scaling.plot(sizes, totals, marker="o", linewidth=1.8, color=colour, label=f"{series}: all prepared")
        for size, value in zip(sizes, totals, strict=True):
            scaling.annotate(
                f"{value:g} s", (size, value), textcoords="offset points", xytext=(4, -12), fontsize=8
            )
        if series == "simulated":
            for key, label in STAGES[:-1]:
                stage = [run["ours"]["breakdown_s"][key] for run in series_runs]
                points = [(n, v) for n, v in zip(sizes, stage, strict=True) if v is not None]
                if points:
                    scaling.plot(
                        *zip(*points, strict=True), linestyle=":", marker=".", linewidth=1, label=label
                    )
        if "other" in series_runs[0]:
            others = [run["other"]["submit_to_all_prepared_s"] for run in series_runs]
            scaling.plot(
                sizes,
                others,
                marker="s",
                linewidth=1.2,
                color=OTHER_COLOUR,
                label=f"{series}: {name}",
            )
    for size, target in targets_s.items():
        scaling.plot([size], [target], marker="_", markersize=18, color=P99_COLOUR)
        _horizontal_target(scaling, target, f"target ≤ {target:g} s at {size} nodes", P99_COLOUR)
    scaling.set_xlabel("nodes = pods (one channel claim each)")
    scaling.set_ylabel("seconds since submit")
    scaling.set_title("Time to every claim prepared, and its stages")
    scaling.set_ylim(bottom=0)
    scaling.legend(loc="upper center", bbox_to_anchor=(0.5, -0.15), ncols=2, frameon=False, fontsize=8)

    for series, style in (("simulated", "-"), ("simulated_driver_managed", "--")):
        for run in runs[series] or (runs["kubelets"] if series == "simulated" else []):
            mode = "driver-managed" if series == "simulated_driver_managed" else "host-managed"
            label = f"{run['nodes']} nodes, {mode}"
            _count_curve(curves, run["ours"]["prepared_curve_s"], linestyle=style, linewidth=1.5, label=label)
            if "other" in run:
                _count_curve(
                    curves,
                    run["other"]["prepared_curve_s"],
                    linestyle=style,
                    linewidth=1.5,
                    color=OTHER_COLOUR,
                    label=f"{label}, {name}",
                )
    for size, target in targets_s.items():
        _vertical(curves, target, f"target {size} nodes ≤ {target:g} s", P99_COLOUR, target=True)
    curves.set_xlabel("seconds since submit")
    curves.set_ylabel("claims prepared")
    curves.set_title("Claims prepared over time (simulated nodes; dashed: driver-managed)")
    curves.legend(loc="lower right", fontsize=8)

    # The host-managed series first; a driver-managed run alone (`--mode driver-managed`) is shown too.
    shown = runs["simulated"] or runs["kubelets"] or runs["simulated_driver_managed"] or [{}]
    largest = max(shown, key=lambda run: run.get("nodes", 0))
    if "ours" in largest:
        ours_api = largest["ours"]["api"]
        their_api = largest["other"]["api"] if "other" in largest else None
        table = list(ours_api["by_verb_and_resource"].items())[:12]
        labels = [label for label, _ in table][::-1]
        values = [count for _, count in table][::-1]
        height = 0.4 if their_api is not None else 0.8
        rows = range(len(labels))
        bars = requests.barh(
            [r + (height / 2 if their_api is not None else 0) for r in rows],
            values,
            height=height,
            color="tab:blue",
            label=f"imexdra (409: {ours_api['409']}, 429: {ours_api['429']})",
        )
        requests.bar_label(bars, fmt="%g", fontsize=7)
        if their_api is not None:  # the same requests of the other controller's run, beside ours
            theirs = [their_api["by_verb_and_resource"].get(label, 0) for label in labels]
            bars = requests.barh(
                [r - height / 2 for r in rows],
                theirs,
                height=height,
                color=OTHER_COLOUR,
                label=f"{name} (409: {their_api['409']}, 429: {their_api['429']})",
            )
            requests.bar_label(bars, fmt="%g", fontsize=7)
            requests.legend(loc="lower right", fontsize=8)
        requests.set_yticks(list(rows), labels)
        requests.set_title(f"API requests, {largest['nodes']} nodes (ours' top 12)")
        requests.set_xlabel("requests during the job start")
        requests.tick_params(axis="y", labelsize=8)
        requests.margins(x=0.15)
    figure.savefig(path, dpi=110)


def write_rack_plot(results: dict[str, Any], path: Path) -> None:
    """Controller scale over racks: time to every clique published, writes, controller CPU and RSS."""
    figure, (time_panel, writes_panel, cpu_panel, rss_panel) = _figure(
        "Driver-managed domains of 18 nodes, 1 to 16 racks (72 nodes each), no plugins", panels=4
    )
    runs = [run for run in results.get("runs", []) if "all_published_s" in run]
    racks = [run["racks"] for run in runs]

    def line(axes: Axes, values: list[float], label: str, **style: Any) -> None:
        axes.plot(racks, values, marker="o", linewidth=1.8, label=label, **style)
        for x, value in zip(racks, values, strict=True):
            axes.annotate(f"{value:g}", (x, value), textcoords="offset points", xytext=(4, -12), fontsize=8)

    line(time_panel, [run["all_published_s"] for run in runs], "every clique published", color="tab:blue")
    line(
        time_panel,
        [run["claim_floor_s"] for run in runs],
        "floor: kcm's daemon claims at 20 QPS",
        color="tab:gray",
        linestyle="--",
    )
    time_panel.set_ylabel("seconds since the domains were created")
    time_panel.set_title("Time to every node published Ready")
    line(writes_panel, [run["controller_writes"]["total"] for run in runs], "controller writes")
    line(
        writes_panel,
        [run["api"]["requests"] / 10 for run in runs],
        "apiserver requests / 10 (every client)",
        linestyle=":",
    )
    writes_panel.set_ylabel("requests during the run")
    writes_panel.set_title("API writes")
    line(cpu_panel, [run["cpu_s"]["controller"] for run in runs], "controller", color="tab:green")
    line(
        cpu_panel,
        [run["cpu_s"].get("kube-apiserver", 0.0) for run in runs],
        "kube-apiserver",
        color="tab:purple",
        linestyle=":",
    )
    cpu_panel.set_ylabel("CPU seconds during the run")
    cpu_panel.set_title("CPU")
    line(
        rss_panel,
        [run["controller_rss_mib"]["VmHWM"] for run in runs],
        "controller peak RSS",
        color="tab:red",
    )
    rss_panel.set_ylabel("MiB")
    rss_panel.set_title("Controller memory")
    for axes in (time_panel, writes_panel, cpu_panel, rss_panel):
        axes.set_xscale("log", base=2)
        axes.set_xticks(racks, [str(r) for r in racks])
        axes.set_xlabel("racks (72 nodes, four domains each)")
        axes.set_ylim(bottom=0)
        axes.legend(loc="upper left", fontsize=8)
    figure.savefig(path, dpi=110)
