"""The shipped Prometheus alerting rules name only series and labels the controller exports.

What is checked: the file's shape (groups of rules, each with an alert name, an expression, a ``for``
duration, a severity and a summary and description), that every metric an expression names is a
family the controller registers, and that every ``$labels.<name>`` a text uses is a label of a
family its expression names. Not checked here: PromQL syntax beyond that, or evaluation against
series (Prometheus's own rule tests would; docs/imex-health.md §6).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY
from prometheus_client.metrics import MetricWrapperBase

import imexdra.controller.imexhealth
import imexdra.controller.metrics

RULES = Path(__file__).parents[2] / "deployments/prometheus/imexdra-rules.yaml"
FAMILIES: dict[str, tuple[str, ...]] = {
    # prometheus_client keeps a family's name and label names in these attributes.
    metric._name: tuple(metric._labelnames)
    for module in (imexdra.controller.metrics, imexdra.controller.imexhealth)
    for metric in vars(module).values()
    if isinstance(metric, MetricWrapperBase)
}
IDENTIFIER = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()")
PROMQL_WORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "bool", "offset"}


def rules() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULES.read_text())
    return [rule for group in document["groups"] for rule in group["rules"]]


def named_metrics(expr: str) -> set[str]:
    without_matchers = re.sub(r"\{[^}]*\}", "", expr)
    return {word for word in IDENTIFIER.findall(without_matchers) if word not in PROMQL_WORDS}


@pytest.mark.parametrize("rule", rules(), ids=[r["alert"] for r in rules()])
def test_rule_names_exported_series_and_labels(rule: dict[str, Any]) -> None:
    """Shape, metric names and label references of one alerting rule."""
    assert re.fullmatch(r"[A-Z][A-Za-z]+", rule["alert"])
    assert re.fullmatch(r"\d+[smh]", rule["for"])
    assert rule["labels"]["severity"] in {"warning", "critical"}
    assert {"summary", "description"} <= set(rule["annotations"])
    metrics = named_metrics(rule["expr"])
    assert metrics and metrics <= set(FAMILIES), f"unknown series in {rule['expr']!r}"
    labels = {label for metric in metrics for label in FAMILIES[metric]}
    used = {m for text in rule["annotations"].values() for m in re.findall(r"\$labels\.(\w+)", text)}
    assert used <= labels, f"{rule['alert']} uses labels its series do not have: {used - labels}"


def test_every_rule_family_is_registered() -> None:
    """The families the rules rely on are in the default registry the metrics endpoint serves."""
    registered = set(REGISTRY._names_to_collectors)
    for metric in {m for rule in rules() for m in named_metrics(rule["expr"])}:
        assert metric in registered
