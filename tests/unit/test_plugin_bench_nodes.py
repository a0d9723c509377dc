"""bench/plugin_nodes.py (``plugin_bench.py --nodes``): node names and addresses, daemons, pooling."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from tests.support.paths import BENCH
from tests.support.scripts import load_script

CLIQUE = "7c9a3e1f-0d2b-4c5e-8f6a-1b2c3d4e5f60.32766"


@pytest.fixture(scope="module")
def nodes() -> ModuleType:
    """The module, loaded as the bench's scripts are, after the one bench module it imports (``stats``)."""
    load_script(BENCH / "stats.py")
    return load_script(BENCH / "plugin_nodes.py")


def turn(prepare: list[float], rss: float, idle: float, exit_code: int = 0) -> dict[str, Any]:
    """One node's turn as ``plugin_turn.Turn.finish`` reports it, reduced to what ``pool`` reads."""
    cycles = [
        {
            "prepare_ms": value,
            "unprepare_ms": value / 2,
            "prepare_own_ms": value / 10,
            "unprepare_own_ms": value / 20,
            "pod_running_s": value / 100,
            "cpu_ms": value / 4,
            "api_requests": 4,
            "rate_limiter_wait_ms": value / 10,
        }
        for value in prepare
    ]
    reading = {"VmRSS": rss, "VmHWM": rss + 1}
    return {
        "start_to_registered_s": rss / 10,
        "first_cycle": {"prepare_ms": prepare[0] * 3},
        "idle_window_s": 30.0,
        "idle_cpu_ms_per_s": idle,
        "cpu_ms_per_cycle_mean_from_ticks": idle * 10,
        "rss_mib": {"after_first_cycle": reading, "idle": reading, "after_cycles": reading},
        "threads": int(rss),
        "processes": 1,
        "exit_code": exit_code,
        "calls_per_cycle_not_one": 1,
        "cycles": cycles,
    }


def test_node_one_is_the_single_node_runs_node_and_the_others_are_numbered(nodes: ModuleType) -> None:
    """``bench-node`` with 127.100.1.0/24 as before ``--nodes``; node i its own range and addresses."""
    assert nodes.node_names(1) == ["bench-node"]
    assert nodes.node_names(3) == ["bench-node", "bench-node-2", "bench-node-3"]
    assert [nodes.pod_cidr(i) for i in (1, 8)] == ["127.100.1.0/24", "127.100.8.0/24"]
    assert nodes.node_address(3, 250) == "127.100.3.250"


def test_every_node_has_its_daemon_ready_at_its_own_index_and_address(nodes: ModuleType) -> None:
    """One node gives the entry the single-node bench wrote; more give one per node, indexes from 0."""
    assert nodes.daemons(["bench-node"], CLIQUE) == [
        {
            "nodeName": "bench-node",
            "ipAddress": "127.100.1.200",
            "cliqueID": CLIQUE,
            "index": 0,
            "status": "Ready",
        }
    ]
    listed = nodes.daemons(nodes.node_names(3), CLIQUE)
    assert [(d["nodeName"], d["ipAddress"], d["index"]) for d in listed] == [
        ("bench-node", "127.100.1.200", 0),
        ("bench-node-2", "127.100.2.200", 1),
        ("bench-node-3", "127.100.3.200", 2),
    ]
    assert {d["status"] for d in listed} == {"Ready"}


def test_summary_is_the_nearest_rank_p50_p99_and_the_max(nodes: ModuleType) -> None:
    """101 values 0..100: p50 50, p99 99; an even count takes the rank rounded (half to even)."""
    assert nodes.summary([float(v) for v in reversed(range(101))]) == {"p50": 50.0, "p99": 99.0, "max": 100.0}
    assert nodes.summary([1.0, 2.0, 3.0, 4.0]) == {"p50": 3.0, "p99": 4.0, "max": 4.0}
    assert nodes.summary([0.12345]) == {"p50": 0.123, "p99": 0.123, "max": 0.123}


def test_pool_takes_percentiles_over_every_nodes_cycles_together(nodes: ModuleType) -> None:
    """The six cycles of two nodes ranked together: p50 and p99 are cycles', not a node's figures."""
    pooled = nodes.pool(
        "imexdra",
        {
            "bench-node": turn([1.0, 2.0, 3.0], rss=40, idle=1.0),
            "bench-node-2": turn([10.0] * 3, rss=60, idle=3.0),
        },
    )
    assert pooled["cycles_pooled"] == 6
    assert pooled["prepare_ms"] == {"p50": 3.0, "p99": 10.0, "max": 10.0}  # of 1, 2, 3, 10, 10, 10
    assert pooled["unprepare_ms"] == {"p50": 1.5, "p99": 5.0, "max": 5.0}
    assert pooled["cpu_ms_per_cycle"] == {"p50": 0.75, "p99": 2.5, "max": 2.5}
    assert pooled["pod_running_s"]["p50"] == 0.03
    assert set(nodes.CYCLE_FIGURES) <= pooled.keys()
    assert pooled["calls_per_cycle_not_one"] == 2


def test_pool_reports_each_process_as_the_mean_over_nodes_with_the_max(nodes: ModuleType) -> None:
    """RSS and idle CPU are per plugin process: the mean under the single-node keys, the max beside."""
    by_node = {
        "bench-node": turn([1.0], rss=40, idle=1.0),
        "bench-node-2": turn([2.0], rss=60, idle=3.0, exit_code=-15),
    }
    pooled = nodes.pool("upstream", by_node)
    assert pooled["plugin"] == "upstream"
    assert pooled["nodes"] == 2
    assert pooled["rss_mib"]["idle"] == {"VmRSS": 50.0, "VmHWM": 51.0}
    assert pooled["rss_mib_max"]["after_cycles"] == {"VmRSS": 60.0, "VmHWM": 61.0}
    assert pooled["idle_cpu_ms_per_s"] == 2.0
    assert pooled["idle_cpu_ms_per_s_max"] == 3.0
    assert pooled["start_to_registered_s_max"] == 6.0
    assert pooled["first_cycle_prepare_ms"]["max"] == 6.0
    assert pooled["threads"] == 60
    assert pooled["exit_codes_not_zero"] == 1
    assert pooled["by_node"] is by_node
