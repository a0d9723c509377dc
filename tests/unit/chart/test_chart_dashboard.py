"""The chart's opt-in Grafana dashboard (docs/monitoring.md, "Dashboard").

Off by default; on, one ConfigMap labelled for the Grafana sidecar holds files/grafana-dashboard.json
unchanged. The dashboard itself: valid JSON with a stable uid, every panel and variable on the
``datasource`` variable, and every query naming only series our components export.
"""

from __future__ import annotations

import json
import re
from typing import Any

from tests.support.paths import CHART_DIR
from tests.unit.chart.helm import Object, render
from tests.unit.chart.promql import families, named_metrics

DASHBOARD = CHART_DIR / "files" / "grafana-dashboard.json"
ON = {"metrics": {"grafanaDashboard": {"enabled": True}}}


def dashboard() -> Object:
    """The dashboard as the chart ships it."""
    loaded: Object = json.loads(DASHBOARD.read_text())
    return loaded


def panels() -> list[Object]:
    """Every panel that queries (rows hold none)."""
    return [panel for panel in dashboard()["panels"] if panel["type"] != "row"]


def test_no_dashboard_by_default() -> None:
    """Default values render no ConfigMap at all."""
    assert render().of_kind("ConfigMap") == []


def test_the_configmap_carries_the_dashboard_for_the_sidecar() -> None:
    """Sidecar label, driver namespace, the file's JSON unchanged; labels, annotations, namespace set."""
    (configmap,) = render(ON).of_kind("ConfigMap")
    assert configmap["metadata"]["namespace"] == "imexdra"
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["imexdra-overview.json"]) == dashboard()
    custom: dict[str, Any] = {
        "metrics": {
            "grafanaDashboard": {
                "enabled": True,
                "labels": {"team": "gpu"},
                "annotations": {"grafana_folder": "GPU"},
                "namespace": "monitoring",
            }
        }
    }
    (configmap,) = render(custom).of_kind("ConfigMap")
    assert configmap["metadata"]["namespace"] == "monitoring"
    assert configmap["metadata"]["labels"]["team"] == "gpu"
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1", "Helm merges labels into the default"
    assert configmap["metadata"]["annotations"] == {"grafana_folder": "GPU"}


def test_every_panel_asks_the_datasource_variable() -> None:
    """One Prometheus data source, chosen on the dashboard: no panel or target names its own."""
    board = dashboard()
    assert board["uid"] == "imexdra-overview"
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    wanted = {"type": "prometheus", "uid": "${datasource}"}
    for panel in panels():
        assert panel["datasource"] == wanted, panel["title"]
        assert panel["targets"] and all(target["datasource"] == wanted for target in panel["targets"])
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))


def test_every_query_names_exported_series() -> None:
    """Panel queries and variable queries name only families our components register."""
    registered = set(families())
    queries = [target["expr"] for panel in panels() for target in panel["targets"]]
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] == "query":
            inner = re.fullmatch(r"label_values\((.*), \w+\)", variable["query"]["query"])
            assert inner is not None, variable["query"]
            queries.append(inner.group(1))
    for expr in queries:
        metrics = named_metrics(expr.replace("$__rate_interval", "5m"))
        assert metrics and metrics <= registered, f"unknown series in {expr!r}: {metrics - registered}"
