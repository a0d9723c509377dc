"""The nodes of ``plugin_bench.py --nodes N`` and the pooling of their turns (pure: no cluster, no process).

- ``node_names``/``pod_cidr``/``node_address``: node ``i`` (1-based) is ``bench-node`` (``i = 1``, the
  single-node run's node) or ``bench-node-<i>``, with pod range ``127.100.<i>.0/24`` and its addresses
  (its daemon's, its host nvidia-imex's) in that range;
- ``daemons``: the node list the controller writes once every node's IMEX daemon is Ready, as the
  ComputeDomainClique's ``daemons`` and the domain's ``status.nodes`` spell it;
- ``summary``: p50, p99 and max of one figure (nearest rank, ``stats.percentile``);
- ``pool``: one plugin's figures over every node's turn: the per-cycle figures pooled over all nodes'
  cycles, the per-process ones (RSS, idle CPU) as the mean over nodes with the max beside it, and the
  turns themselves under ``by_node``.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from stats import percentile

NODE = "bench-node"
#: Per-cycle figures of a turn (``plugin_turn.Cycles.cycle``) summarised with ``summary``, as
#: ``<figure>`` of the turn; ``cpu_ms`` is reported as ``cpu_ms_per_cycle``.
CYCLE_FIGURES = {
    "prepare_ms": "prepare_ms",
    "unprepare_ms": "unprepare_ms",
    "prepare_own_ms": "prepare_own_ms",
    "unprepare_own_ms": "unprepare_own_ms",
    "pod_running_s": "pod_running_s",
    "cpu_ms_per_cycle": "cpu_ms",
    "api_requests_per_cycle": "api_requests",
    "rate_limiter_wait_ms": "rate_limiter_wait_ms",
}
#: The RSS readings of a turn (``rss_mib.<phase>.<VmRSS|VmHWM>``).
RSS_PHASES = ("after_first_cycle", "idle", "after_cycles")


def node_names(count: int) -> list[str]:
    """The bench's ``count`` nodes: ``bench-node``, then ``bench-node-2``, ``bench-node-3`` and on."""
    return [NODE if index == 1 else f"{NODE}-{index}" for index in range(1, count + 1)]


def pod_cidr(index: int) -> str:
    """Node ``index``'s pod range (1-based; fakecri gives its pods addresses in it)."""
    return f"127.100.{index}.0/24"


def node_address(index: int, host: int) -> str:
    """Address ``host`` of node ``index``'s range (``.200``: its IMEX daemon, ``.250``: its host IMEX)."""
    return f"127.100.{index}.{host}"


def daemons(names: list[str], clique: str) -> list[dict[str, Any]]:
    """Every node's daemon Ready in ``clique``, as the clique's ``daemons`` list (``nodeName`` first)."""
    return [
        {
            "nodeName": name,
            "ipAddress": node_address(index, 200),
            "cliqueID": clique,
            "index": index - 1,
            "status": "Ready",
        }
        for index, name in enumerate(names, 1)
    ]


def summary(values: list[float]) -> dict[str, float]:
    """p50, p99 and max (nearest rank) of ``values``, rounded to 3 decimals."""
    return {
        "p50": round(percentile(values, 0.5), 3),
        "p99": round(percentile(values, 0.99), 3),
        "max": round(max(values), 3),
    }


def pool(plugin: str, by_node: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Plugin ``plugin``'s figures over its turns on every node (``by_node``: node name → its turn).

    The percentiles are over all nodes' cycles together, so a slow node weighs as many cycles as it
    ran. RSS and idle CPU are per plugin process: the mean over the nodes' processes (the same keys as
    one node's turn, so ``plugin_bench.ratios`` reads either) and their max under ``..._max``.
    """
    turns = list(by_node.values())
    cycles = [cycle for turn in turns for cycle in turn["cycles"]]

    def mean(values: list[float]) -> float:
        return round(statistics.fmean(values), 3)

    def rss(combine: Callable[[list[float]], float]) -> dict[str, dict[str, float]]:
        return {
            phase: {
                key: round(combine([turn["rss_mib"][phase][key] for turn in turns]), 1)
                for key in ("VmRSS", "VmHWM")
            }
            for phase in RSS_PHASES
        }

    idle = [turn["idle_cpu_ms_per_s"] for turn in turns]
    return {
        "plugin": plugin,
        "nodes": len(turns),
        "cycles_pooled": len(cycles),
        "start_to_registered_s_max": max(turn["start_to_registered_s"] for turn in turns),
        "first_cycle_prepare_ms": summary([turn["first_cycle"]["prepare_ms"] for turn in turns]),
        "idle_window_s": turns[0]["idle_window_s"],
        "idle_cpu_ms_per_s": mean(idle),
        "idle_cpu_ms_per_s_max": round(max(idle), 3),
        "cpu_ms_per_cycle_mean_from_ticks": mean(
            [turn["cpu_ms_per_cycle_mean_from_ticks"] for turn in turns]
        ),
        "rss_mib": rss(statistics.fmean),
        "rss_mib_max": rss(max),
        "threads": max(turn["threads"] for turn in turns),
        "processes": max(turn["processes"] for turn in turns),
        "exit_codes_not_zero": sum(1 for turn in turns if turn["exit_code"] != 0),
        **{figure: summary([cycle[key] for cycle in cycles]) for figure, key in CYCLE_FIGURES.items()},
        "calls_per_cycle_not_one": sum(turn["calls_per_cycle_not_one"] for turn in turns),
        "by_node": by_node,
    }
