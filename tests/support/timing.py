"""Where the suite's time goes: seconds per tier and the slowest modules, printed at the end of a run.

A module's time is the sum of its tests' setup, call and teardown phases, so a cluster its
module-scoped fixture brings up counts once, in the module that starts it. ``--times-json=PATH`` also
writes the figures (docs/local-cluster.md keeps a table of tier times taken from such a file).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

SLOWEST = 20
"""How many modules the summary lists."""


def tier_of(module: str) -> str:
    """``tests/<tier>/...`` → tier (``unit``, ``integration``, ``e2e``)."""
    parts = module.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else "other"


class SuiteTimes:
    """A pytest plugin adding each test phase's duration to its module's total."""

    def __init__(self, json_path: str) -> None:
        self.by_module: defaultdict[str, float] = defaultdict(float)
        self.json_path = json_path

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Add one phase's duration to its module."""
        self.by_module[report.nodeid.split("::", 1)[0]] += report.duration

    def by_tier(self) -> dict[str, float]:
        """Seconds per tier, summed over its modules."""
        tiers: defaultdict[str, float] = defaultdict(float)
        for module, seconds in self.by_module.items():
            tiers[tier_of(module)] += seconds
        return dict(tiers)

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        """Print the tiers' seconds and the slowest modules; write them to ``--times-json``."""
        if not self.by_module:
            return
        tiers = self.by_tier()
        terminalreporter.section("time per tier and slowest modules")
        terminalreporter.write_line(
            "  ".join(f"{tier} {seconds:.0f}s" for tier, seconds in sorted(tiers.items()))
        )
        slowest = sorted(self.by_module.items(), key=lambda item: -item[1])[:SLOWEST]
        for module, seconds in slowest:
            terminalreporter.write_line(f"{seconds:8.1f}s  {module}")
        if self.json_path:
            payload = {"tiers": tiers, "modules": dict(sorted(self.by_module.items()))}
            Path(self.json_path).write_text(json.dumps(payload, indent=1, sort_keys=True) + "\n")
