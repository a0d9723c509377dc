"""A real Prometheus beside a local cluster: Debian's binary, the chart's monitors and rules loaded.

``running`` starts ``prometheus`` (tools/k8s/prometheus.sh unpacks it, docs/monitoring.md §4) as a
host process of the cluster, with its data and config under the cluster's run directory. What it
scrapes and evaluates comes from the chart as rendered, never from a copy:

- each rendered PodMonitor becomes the scrape job the Prometheus Operator would generate for it
  (``pod_monitor_job``): the endpoint's path, interval and ``honorLabels``, and as targets
  (``pod_targets``) the running pods of the monitor's namespaces that its ``selector.matchLabels``
  selects, at each container port named as the endpoint's ``port``, with the operator's
  ``namespace``/``pod``/``container``/``job``/``endpoint`` labels. So a selector or port name that
  misses the pods shows up as a missing target;
- the rendered PrometheusRule's ``spec.groups`` are its rule file.

Debian builds Prometheus without Kubernetes service discovery (its client libraries are not packaged),
so the pods are found here, with ``kubectl``, and handed to Prometheus as a file-based discovery file
per job; the selection is the operator's, the scraping and rule evaluation are Prometheus's own. The
host reaches pod IPs through the routes the cluster's fabric installs (docs/node-runtime.md §6), as a
Prometheus inside the cluster would. ``Prometheus`` answers from the HTTP API (``/api/v1/targets``,
``/api/v1/alerts``, ``/api/v1/query``).
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from imexdra_sim.localcluster.binaries import prometheus_tool
from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.localcluster.processes import free_port
from tests.support.kubectl import get_json
from tests.support.waiting import wait_until

Object = dict[str, Any]
#: How often rules are evaluated: short, so a test's bound is set by the rules' ``for`` and the driver.
EVALUATION_INTERVAL = "5s"


def job_name(monitor: Mapping[str, Any], index: int) -> str:
    """The operator's name for the job of a PodMonitor's ``index``-th endpoint."""
    return f"podMonitor/{monitor['metadata']['namespace']}/{monitor['metadata']['name']}/{index}"


def pod_monitor_jobs(monitor: Mapping[str, Any], targets_dir: Path) -> list[Object]:
    """The scrape jobs of one PodMonitor, one per endpoint; targets from ``<targets_dir>/<n>.json``."""
    jobs = []
    for index, endpoint in enumerate(monitor["spec"]["podMetricsEndpoints"]):
        name = job_name(monitor, index)
        job: Object = {
            "job_name": name,
            "honor_labels": bool(endpoint.get("honorLabels", False)),
            "metrics_path": endpoint.get("path", "/metrics"),
            "file_sd_configs": [{"files": [str(targets_dir / f"{name.replace('/', '_')}.json")]}],
        }
        if "interval" in endpoint:
            job["scrape_interval"] = endpoint["interval"]
        jobs.append(job)
    return jobs


def pod_targets(monitor: Mapping[str, Any], index: int, pods: Sequence[Mapping[str, Any]]) -> list[Object]:
    """File-discovery target groups of endpoint ``index``: what the operator's relabelling keeps.

    A pod counts if it is in one of the monitor's namespaces, carries every ``matchLabels`` pair, has an
    IP and has not finished; each of its containers' ports named as the endpoint's ``port`` is a target.
    """
    meta, spec = monitor["metadata"], monitor["spec"]
    namespaces = spec.get("namespaceSelector", {}).get("matchNames") or [meta["namespace"]]
    wanted = spec["selector"].get("matchLabels", {})
    port_name = spec["podMetricsEndpoints"][index]["port"]
    groups = []
    for pod in pods:
        pod_meta, status = pod["metadata"], pod.get("status", {})
        labels = pod_meta.get("labels", {})
        if pod_meta.get("namespace") not in namespaces or any(labels.get(k) != v for k, v in wanted.items()):
            continue
        if not status.get("podIP") or status.get("phase") in ("Succeeded", "Failed"):
            continue
        for container in pod["spec"]["containers"]:
            for port in container.get("ports", []):
                if port.get("name") != port_name:
                    continue
                groups.append(
                    {
                        "targets": [f"{status['podIP']}:{port['containerPort']}"],
                        "labels": {
                            "namespace": pod_meta["namespace"],
                            "pod": pod_meta["name"],
                            "container": container["name"],
                            "endpoint": port_name,
                            "job": f"{meta['namespace']}/{meta['name']}",
                        },
                    }
                )
    return groups


def discover(cluster: LocalCluster, monitors: Sequence[Mapping[str, Any]], targets_dir: Path) -> None:
    """Write each monitor's targets file from the pods the cluster runs now (Prometheus rereads it)."""
    namespaces = {
        name
        for monitor in monitors
        for name in monitor["spec"].get("namespaceSelector", {}).get("matchNames")
        or [monitor["metadata"]["namespace"]]
    }
    pods = [
        pod for namespace in sorted(namespaces) for pod in get_json(cluster, "pods", "-n", namespace)["items"]
    ]
    for monitor in monitors:
        for index, _endpoint in enumerate(monitor["spec"]["podMetricsEndpoints"]):
            path = targets_dir / f"{job_name(monitor, index).replace('/', '_')}.json"
            staged = path.with_suffix(".tmp")
            # Written whole, then renamed: Prometheus never reads half a file.
            staged.write_text(json.dumps(pod_targets(monitor, index, pods)))
            staged.rename(path)


@dataclass(frozen=True)
class Prometheus:
    """A running Prometheus, asked through its HTTP API."""

    url: str

    def api(self, path: str, **params: str) -> Any:
        """The ``data`` of one API answer (``path`` below ``/api/v1/``)."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=10) as answer:
            body = json.load(answer)
        assert body["status"] == "success", body
        return body["data"]

    def alerts(self, name: str, state: str) -> list[dict[str, str]]:
        """The label sets of alert ``name`` in ``state`` (``pending`` or ``firing``)."""
        return [
            alert["labels"]
            for alert in self.api("alerts")["alerts"]
            if alert["labels"]["alertname"] == name and alert["state"] == state
        ]

    def targets_up(self) -> dict[str, list[str]]:
        """The healthy active targets' ``pod`` labels, by job."""
        up: dict[str, list[str]] = {}
        for target in self.api("targets", state="active")["activeTargets"]:
            if target["health"] == "up":
                up.setdefault(target["labels"]["job"], []).append(target["labels"].get("pod", ""))
        return up

    def query(self, expr: str) -> list[Object]:
        """An instant query's vector."""
        result: list[Object] = self.api("query", query=expr)["result"]
        return result

    def ready(self) -> bool:
        """Whether the server answers ``/-/ready``."""
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=5) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False


@contextmanager
def running(
    cluster: LocalCluster,
    *,
    pod_monitors: Sequence[Mapping[str, Any]],
    rule_groups: Sequence[Mapping[str, Any]],
) -> Iterator[Prometheus]:
    """Prometheus scraping the pods ``pod_monitors`` select in ``cluster`` (found once, at the start),
    evaluating ``rule_groups``."""
    assert cluster.run_dir is not None
    directory = cluster.run_dir / "prometheus"
    targets = directory / "targets"
    targets.mkdir(parents=True, exist_ok=True)
    (directory / "rules.yaml").write_text(yaml.safe_dump({"groups": list(rule_groups)}))
    discover(cluster, pod_monitors, targets)
    config = {
        "global": {"evaluation_interval": EVALUATION_INTERVAL},
        "rule_files": [str(directory / "rules.yaml")],
        "scrape_configs": [job for monitor in pod_monitors for job in pod_monitor_jobs(monitor, targets)],
    }
    (directory / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    process = cluster.start_process(
        "prometheus",
        [
            str(prometheus_tool("prometheus")),
            f"--config.file={directory / 'prometheus.yml'}",
            f"--storage.tsdb.path={directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
    )
    server = Prometheus(f"http://127.0.0.1:{port}")
    try:
        wait_until("Prometheus ready", lambda: process.alive() and server.ready(), timeout=60)
        yield server
    finally:
        process.stop()
