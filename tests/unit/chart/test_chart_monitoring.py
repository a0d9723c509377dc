"""The chart's opt-in Prometheus Operator objects (docs/monitoring.md), and its alerts run by promtool.

The rules exist once, in the chart's template: every test here reads them from ``helm template``. The
promtool test feeds synthetic series through the rendered groups and checks that each alert fires
after its ``for:`` and clears when the series recover.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from imexdra.common.errors import ConfigError
from imexdra_sim.localcluster.binaries import prometheus_tool
from tests.support.prometheus import pod_monitor_jobs, pod_targets
from tests.unit.chart.helm import Object, merge, render
from tests.unit.chart.promql import families, labels_of, named_metrics

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


def rule_groups(values: dict[str, Any]) -> list[Object]:
    """The rule groups of the rendered PrometheusRule."""
    (rule,) = render(values).of_kind("PrometheusRule")
    groups: list[Object] = rule["spec"]["groups"]
    return groups


def alerts(values: dict[str, Any]) -> list[Object]:
    """Every alerting rule the chart renders with ``values``."""
    return [rule for group in rule_groups(values) for rule in group["rules"]]


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
    registered = set(families())
    docs = DOCS.read_text()
    for rule in alerts(values):
        assert re.fullmatch(r"\d+[smh]", rule["for"])
        assert rule["labels"]["severity"] in {"warning", "critical"}
        assert {"summary", "description", "runbook_url"} <= set(rule["annotations"])
        metrics = named_metrics(rule["expr"])
        assert metrics and metrics <= registered, (
            f"unknown series in {rule['expr']!r}: {metrics - registered}"
        )
        labels = labels_of(metrics)
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
    assert pool["expr"].endswith(">= 0.9")
    assert "of the 10 IMEX channels" in pool["annotations"]["description"]  # channelCount 11 - channel 0


def test_each_alert_takes_its_for_and_severity_from_values_or_is_left_out() -> None:
    """metrics.prometheusRule.alerts.<name>: ``for`` and ``severity`` replace the defaults (the text
    says the new duration), ``enabled: false`` drops the alert and a group left empty; the rest as before."""
    overrides = {
        "IMEXPeerNotConnected": {"for": "30s", "severity": "critical"},
        "ComputeDomainPrepareErrors": {"enabled": False},
    }
    values = merge(ALL_ON, {"metrics": {"prometheusRule": {"alerts": overrides}}})
    rules = {rule["alert"]: rule for rule in alerts(values)}
    defaults = {rule["alert"]: rule for rule in alerts(ALL_ON)}
    changed = rules["IMEXPeerNotConnected"]
    assert (changed["for"], changed["labels"]["severity"]) == ("30s", "critical")
    assert "for 30s." in changed["annotations"]["description"]
    assert defaults["IMEXPeerNotConnected"]["for"] == "5m"
    assert set(rules) == set(defaults) - {"ComputeDomainPrepareErrors"}
    assert "imexdra-kubelet-plugin" not in {group["name"] for group in rule_groups(values)}
    for name in set(rules) - {"IMEXPeerNotConnected"}:
        assert rules[name] == defaults[name]
    every = {name: {"enabled": False} for name in defaults}
    assert not render(merge(ALL_ON, {"metrics": {"prometheusRule": {"alerts": every}}})).of_kind(
        "PrometheusRule"
    )


def _promtool() -> Path:
    """Debian's promtool as ``make k8s`` unpacks it (tools/k8s/prometheus.sh), else one on PATH."""
    try:
        return prometheus_tool("promtool")
    except ConfigError as missing:
        on_path = shutil.which("promtool")
        if on_path is None:
            pytest.skip(f"promtool unavailable, not on PATH either: {missing}")
        return Path(on_path)


def _firing(alert: str, at: str, labels: dict[str, str], severity: str, value: str = "") -> dict[str, Any]:
    """``alert`` fires at ``at`` with ``labels``; its annotations are the rendered ones, expanded for them."""
    (rule,) = [r for r in alerts({**ALL_ON, **CHANNEL_ISOLATION}) if r["alert"] == alert]

    def expand(text: str) -> str:
        text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], text)
        # ``value`` as the alert's text shows it (humanized where the template pipes it so).
        return re.sub(r"\{\{ \$value( \| \w+)? \}\}", lambda _: value, text)

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
    # A pool of 10: 9 taken (90 %) for half an hour, then 5.
    _series("imexdra_imex_channel_pool_size", CONTROLLER, "10x60"),
    _series("imexdra_imex_channels_in_use", CONTROLLER, "9x30 5x30"),
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
    _cleared("IMEXChannelPoolNearlyExhausted", "5m"),
    _firing("IMEXChannelPoolNearlyExhausted", "20m", CONTROLLER, "warning", "90%"),
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


def test_the_e2e_scrape_jobs_of_the_rendered_pod_monitors_are_a_valid_config(tmp_path: Path) -> None:
    """The jobs tests/support/prometheus.py makes of each rendered PodMonitor (as the Prometheus Operator
    would) pass ``promtool check config``, and each keeps exactly its component's pods' metrics port."""
    promtool = _promtool()
    rendered = render(ALL_ON)
    monitors = rendered.of_kind("PodMonitor")
    jobs = [job for monitor in monitors for job in pod_monitor_jobs(monitor, tmp_path)]
    assert [job["job_name"] for job in jobs] == [
        "podMonitor/imexdra/imexdra-controller/0",
        "podMonitor/imexdra/imexdra-kubelet-plugin/0",
    ]
    assert all(job["honor_labels"] for job in jobs)
    # The chart's own pods, as the API would show them running.
    pods = []
    for kind, name, ip in (
        ("Deployment", "imexdra-controller", "10.0.0.1"),
        ("DaemonSet", "imexdra-kubelet-plugin", "10.0.0.2"),
    ):
        template = rendered.get(kind, name)["spec"]["template"]
        meta = {**template["metadata"], "name": f"{name}-x", "namespace": "imexdra"}
        pods.append({"metadata": meta, "spec": template["spec"], "status": {"podIP": ip, "phase": "Running"}})
    expected = {"imexdra-controller": "10.0.0.1:8080", "imexdra-kubelet-plugin": "10.0.0.2:8081"}
    for monitor in monitors:
        [group] = pod_targets(monitor, 0, pods)
        name = monitor["metadata"]["name"]
        assert group["targets"] == [expected[name]]
        assert group["labels"] == {
            "namespace": "imexdra",
            "pod": f"{name}-x",
            "container": "compute-domain" if name == "imexdra-controller" else "compute-domains",
            "endpoint": "metrics",
            "job": f"imexdra/{name}",
        }
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({"scrape_configs": jobs}))
    result = subprocess.run(
        [str(promtool), "check", "config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
