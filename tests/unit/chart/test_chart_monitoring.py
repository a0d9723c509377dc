"""The chart's opt-in Prometheus Operator objects (docs/monitoring.md), and its alerts run by promtool.

The rules exist once, in the chart's template: every test here reads them from ``helm template``. The
promtool test feeds synthetic series through the rendered groups and checks that each alert fires
after its ``for:`` and clears when the series recover.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from prometheus_client import REGISTRY
from prometheus_client.metrics import MetricWrapperBase

import imexdra.controller.imexhealth
import imexdra.controller.metrics
import imexdra.kubeletplugin.metrics  # noqa: F401  (registers the plugin's families)
from imexdra_sim.localcluster.binaries import cache_root
from tests.unit.chart.helm import Object, render

ALL_ON = {
    "metrics": {
        "podMonitor": {"enabled": True},
        "serviceMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True},
    }
}
CHANNEL_ISOLATION = {
    "featureGates": {"HostManagedIMEX": True},
    "resources": {
        "computeDomains": {"imex": {"mode": "hostManaged", "isolation": "channel", "channelCount": 11}}
    },
}
MONITORING_KINDS = {"PodMonitor", "ServiceMonitor", "PrometheusRule"}
DOCS = Path(__file__).parents[3] / "docs" / "monitoring.md"
IDENTIFIER = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\b(?!\s*\()")
PROMQL_WORDS = {
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "bool",
    "offset",
    "status",
    "rate",
    "sum",
}
# Labels Prometheus itself gives every scraped series.
TARGET_LABELS = {"instance", "job"}


def rule_groups(values: dict[str, Any]) -> list[Object]:
    """The rule groups of the rendered PrometheusRule."""
    (rule,) = render(values).of_kind("PrometheusRule")
    groups: list[Object] = rule["spec"]["groups"]
    return groups


def alerts(values: dict[str, Any]) -> list[Object]:
    """Every alerting rule the chart renders with ``values``."""
    return [rule for group in rule_groups(values) for rule in group["rules"]]


def named_metrics(expr: str) -> set[str]:
    """Series names in a PromQL expression (label matchers, ranges and function names dropped)."""
    bare = re.sub(r"\[[^\]]*\]", "", re.sub(r"\{[^}]*\}", "", re.sub(r"\([a-z_, ]*\)\s*\(", "(", expr)))
    return {w for w in IDENTIFIER.findall(bare) if w not in PROMQL_WORDS and not w[0].isdigit()}


def test_nothing_renders_by_default() -> None:
    """With the defaults no object needs the Prometheus Operator's CRDs, and no extra Service exists."""
    rendered = render()
    assert not {obj["kind"] for obj in rendered.objects} & MONITORING_KINDS
    assert not rendered.of_kind("Service")


def test_monitors_select_the_metrics_ports_of_both_components() -> None:
    """Each PodMonitor/Service selects exactly the pods of its component and scrapes their metrics port."""
    rendered = render(ALL_ON)
    workloads = {
        "controller": rendered.get("Deployment", "imexdra-controller"),
        "kubelet-plugin": rendered.get("DaemonSet", "imexdra-kubelet-plugin"),
    }
    for component, workload in workloads.items():
        labels = workload["spec"]["template"]["metadata"]["labels"]
        ports = {
            p["name"] for c in workload["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])
        }
        assert "metrics" in ports
        pod_monitor = rendered.get("PodMonitor", f"imexdra-{component}")
        assert pod_monitor["apiVersion"] == "monitoring.coreos.com/v1"
        assert pod_monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
        assert pod_monitor["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
        service = rendered.get("Service", f"imexdra-{component}-metrics")
        assert service["spec"]["clusterIP"] == "None"
        assert service["spec"]["selector"].items() <= labels.items()
        monitor = rendered.get("ServiceMonitor", f"imexdra-{component}")
        assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
        assert monitor["spec"]["endpoints"][0]["honorLabels"] is True
    other = render({"metrics": ALL_ON["metrics"], "controller": {"metrics": {"enabled": False}}})
    assert {obj["metadata"]["name"] for obj in other.of_kind("PodMonitor")} == {"imexdra-kubelet-plugin"}


@pytest.mark.parametrize("values", [ALL_ON, {**ALL_ON, **CHANNEL_ISOLATION}], ids=["domain", "channel"])
def test_rules_name_only_exported_series(values: dict[str, Any]) -> None:
    """Shape of each alert, its series are registered families, its labels theirs, its runbook in docs/."""
    registered = set(REGISTRY._names_to_collectors)
    docs = DOCS.read_text()
    for rule in alerts(values):
        assert re.fullmatch(r"\d+[smh]", rule["for"])
        assert rule["labels"]["severity"] in {"warning", "critical"}
        assert {"summary", "description", "runbook_url"} <= set(rule["annotations"])
        metrics = named_metrics(rule["expr"])
        assert metrics and metrics <= registered, (
            f"unknown series in {rule['expr']!r}: {metrics - registered}"
        )
        families = [cast(MetricWrapperBase, REGISTRY._names_to_collectors[m]) for m in metrics]
        labels = {label for family in families for label in family._labelnames} | TARGET_LABELS
        used = {m for text in rule["annotations"].values() for m in re.findall(r"\$labels\.(\w+)", text)}
        assert used <= labels, f"{rule['alert']} uses labels its series lack: {used - labels}"
        anchor = rule["annotations"]["runbook_url"].split("#")[1]
        assert anchor == rule["alert"].lower() and f"### {rule['alert']}" in docs


def test_channel_pool_alert_only_under_channel_isolation() -> None:
    """Under domain isolation every domain shares channel 0: there is no pool to exhaust."""
    assert "IMEXChannelPoolNearlyExhausted" not in {r["alert"] for r in alerts(ALL_ON)}
    (pool,) = [
        r for r in alerts({**ALL_ON, **CHANNEL_ISOLATION}) if r["alert"] == "IMEXChannelPoolNearlyExhausted"
    ]
    assert pool["expr"].endswith(">= 9")  # floor(0.9 * (11 - 1))


#: Debian's prometheus package, unpacked (not installed) into the build cache (tools/debs.sh).
PROMETHEUS_DEB = "prometheus-2.42.0+ds-5+deb12u1"


def _promtool() -> Path:
    on_path = shutil.which("promtool")
    cached = cache_root() / PROMETHEUS_DEB / "usr" / "bin" / "promtool"
    if on_path:
        return Path(on_path)
    if not os.access(cached, os.X_OK):
        pytest.skip(f"promtool unavailable: not on PATH and not at {cached} (unpack {PROMETHEUS_DEB} there)")
    return cached


def _firing(alert: str, at: str, labels: dict[str, str], severity: str, value: str = "") -> dict[str, Any]:
    """``alert`` fires at ``at`` with ``labels``; its annotations are the rendered ones, expanded for them."""
    (rule,) = [r for r in alerts({**ALL_ON, **CHANNEL_ISOLATION}) if r["alert"] == alert]

    def expand(text: str) -> str:
        text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], text)
        return text.replace("{{ $value }}", value)

    annotations = {key: expand(text) for key, text in rule["annotations"].items()}
    expected = {"exp_labels": {**labels, "severity": severity}, "exp_annotations": annotations}
    return {"eval_time": at, "alertname": alert, "exp_alerts": [expected]}


def _cleared(alert: str, at: str) -> dict[str, Any]:
    return {"eval_time": at, "alertname": alert, "exp_alerts": []}


PLUGIN = {"instance": "10.0.0.2:8081", "job": "plugin"}
CONTROLLER = {"instance": "10.0.0.1:8080", "job": "controller"}
PEER = {"namespace": "team", "compute_domain": "cd", "node": "n1", **CONTROLLER}
QUEUE = {"name": "compute-domain", **CONTROLLER}


def _series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{inner}}}", "values": values}


# One sample a minute; each condition holds for a while, then stops.
SERIES = [
    _series("nvidia_dra_compute_domain_info", {"status": "NotReady", **CONTROLLER}, "1x30 0x30"),
    _series("nvidia_dra_compute_domain_info", {"status": "Ready", **CONTROLLER}, "8x60"),
    _series(
        "nvidia_dra_node_prepare_errors_total",
        {"driver": "compute-domain.nvidia.com", "error_type": "prepare_devices", **PLUGIN},
        "0+1x30 30x30",
    ),
    _series("imexdra_imex_peers_expected", PEER, "3x60"),
    _series("imexdra_imex_peers_connected", PEER, "0x30 3x30"),
    # The queue works for 10 minutes, then holds 4 items with none finishing until minute 45.
    _series("workqueue_depth", QUEUE, "4x45 0x15"),
    _series("workqueue_work_duration_seconds_count", QUEUE, "0+1x10 10x50"),
]
TESTS = [
    _cleared("ComputeDomainsNotReady", "10m"),
    _firing("ComputeDomainsNotReady", "20m", {"status": "NotReady", **CONTROLLER}, "warning", "1"),
    _cleared("ComputeDomainsNotReady", "40m"),
    _firing("IMEXChannelPoolNearlyExhausted", "20m", CONTROLLER, "warning", "9"),
    _cleared("IMEXChannelPoolNearlyExhausted", "45m"),
    _cleared("ComputeDomainPrepareErrors", "10m"),
    _firing(
        "ComputeDomainPrepareErrors",
        "25m",
        {"driver": "compute-domain.nvidia.com", "error_type": "prepare_devices", **PLUGIN},
        "warning",
    ),
    _cleared("ComputeDomainPrepareErrors", "45m"),
    _cleared("IMEXPeerNotConnected", "3m"),
    _firing("IMEXPeerNotConnected", "10m", PEER, "warning", "0"),
    _cleared("IMEXPeerNotConnected", "35m"),
    _firing("IMEXNodeIsolated", "10m", PEER, "critical"),
    _cleared("IMEXNodeIsolated", "35m"),
    _cleared("ComputeDomainWorkQueueStuck", "25m"),
    _firing("ComputeDomainWorkQueueStuck", "40m", QUEUE, "critical", "4"),
    _cleared("ComputeDomainWorkQueueStuck", "50m"),
]


def test_promtool_fires_and_clears_every_rendered_alert(tmp_path: Path) -> None:
    """``promtool check rules``, then ``test rules`` on the rendered groups: each alert fires, then clears."""
    promtool = _promtool()
    groups = rule_groups({**ALL_ON, **CHANNEL_ISOLATION})
    tested = {t["alertname"] for t in TESTS}
    assert tested == {r["alert"] for g in groups for r in g["rules"]}, "every rendered alert is tested"
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": groups}))
    # This render's pool is 10 numbers, its threshold 9: 8 Ready + 1 NotReady domains reach it, 8 do not.
    cases = {
        "rule_files": [rules.name],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": SERIES, "alert_rule_test": TESTS}],
    }
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(cases))
    for args in (["check", "rules", rules.name], ["test", "rules", "tests.yaml"]):
        result = subprocess.run(
            [str(promtool), *args], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
        )
        assert result.returncode == 0, result.stdout + result.stderr
