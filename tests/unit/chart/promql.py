"""What the chart's alert rules and dashboard may name: the metric families our components register.

Shared by the monitoring and dashboard tests. ``named_metrics`` finds the series names in a PromQL
expression (label matchers, ranges, label lists of ``by``/``without`` and function names dropped),
``families`` maps every sample name the default registry serves to its family's label names.
"""

from __future__ import annotations

import re

from prometheus_client import REGISTRY

# Imported for what they register in the default registry, which each component's endpoint serves.
import imexdra.common.kube.restmetrics
import imexdra.common.observability.metrics
import imexdra.controller.imexhealth
import imexdra.controller.metrics
import imexdra.kubeletplugin.metrics  # noqa: F401

IDENTIFIER = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()")
PROMQL_WORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "bool", "offset"} | {
    # Aggregation operators, which `by (...)` may separate from their parenthesis.
    *("sum", "min", "max", "avg", "count", "group", "stddev", "stdvar", "topk", "bottomk", "quantile"),
}
#: Labels Prometheus itself gives every scraped series.
TARGET_LABELS = {"instance", "job"}


def named_metrics(expr: str) -> set[str]:
    """Series names in a PromQL expression."""
    bare = re.sub(r"\([a-z_, ]*\)\s*\(", "(", expr)  # `by (a, b) (` -> `(`
    bare = re.sub(r"\[[^\]]*\]", "", re.sub(r"\{[^}]*\}", "", bare))
    return {w for w in IDENTIFIER.findall(bare) if w not in PROMQL_WORDS}


def families() -> dict[str, tuple[str, ...]]:
    """Every sample name the default registry serves, with its family's label names.

    Families of ``prometheus_client`` keep their label names in ``_labelnames``; the process and
    platform collectors have none.
    """
    names = REGISTRY._names_to_collectors
    return {name: tuple(getattr(collector, "_labelnames", ())) for name, collector in names.items()}


def labels_of(metrics: set[str]) -> set[str]:
    """The label names the families of ``metrics`` carry, and the target labels."""
    known = families()
    return {label for metric in metrics for label in known[metric]} | TARGET_LABELS
