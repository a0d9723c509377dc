"""The benchmarks' one percentile: nearest rank, as every result file reports it.

A module of its own, importing nothing of the bench's, so that pure modules (``plugin_nodes``) and
their unit tests use it without ``benchlib``, which builds the runtime venv on import.
"""

from __future__ import annotations


def percentile(values: list[float], fraction: float) -> float:
    """The ``fraction`` percentile of ``values`` by nearest rank (``fraction`` 0.5 is the median)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))]
