"""Upstream's test_cd_logging.bats: what the controller and the kubelet plugin log, by verbosity.

The rack installs the chart at ``logVerbosity=0``; the module later raises it to 6 with ``helm upgrade``
(both components restart). At each level a ComputeDomain is created, a pod on its channel brings up
the node's IMEX daemon, both are deleted, and the components' CRI logs are read (``kubectl logs``
needs a kubelet server this harness does not run).

Checked, with upstream's strings where ours match them: at level 0 the startup lines carry the resolved
configuration (controller: ``Verbosity``, ``additionalNamespaces``, ``maxNodesPerIMEXDomain``,
``"MPSSupport":false``; plugin: ``Verbosity``, ``nodeName``, ``identified fabric clique``, ``driver
version validation``) and per-domain work is logged at info only; at level 6 informer lists, per-domain
teardown steps and API requests appear as well, and daemons of domains created afterwards get
verbosity 6 (upstream test 16's mechanism: daemon verbosity comes from the controller's environment),
which their own logs show (their start line's level; their informer and API request lines at 6 only).
Upstream's Go-specific strings (``reflector.go``, ``round_trippers.go``) have no Python counterpart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from imexdra.api.constants import COMPUTE_DOMAIN_LABEL_KEY
from imexdra_sim import rack
from imexdra_sim.builders import compute_domain
from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.rack import upgrade_chart
from tests.e2e.helpers import (
    CONTROLLER_SELECTOR,
    PLUGIN_SELECTOR,
    channel_pod,
    container_log,
    driver_pods,
    is_ready,
    log_events,
    pod_phase,
)
from tests.support.kubectl import apply, get_json
from tests.support.waiting import wait_until

NAMESPACE = "logging"
NODE = "gb200-00"
CLIQUE_ID = rack.RackConfig().clique_id
"""The clique every fabric node of a rack with default settings reports (the quiet rack's too)."""
REMOVING = "Removing the ComputeDomain's objects"
"""The controller's V(4) line for each step of a deleted domain's teardown."""
INFORMER_RESOURCES = {
    "ComputeDomain",
    "ResourceClaimTemplate",
    "DaemonSet",
    "Pod",
    "Node",
    "ComputeDomainClique",
    "ResourceClaim",  # in-use protection (on by default) reads claims: docs/in-use-protection.md
    "NetworkPolicy",  # the daemons' policies (on by default): docs/tenancy.md, "Network"
}


@dataclass(frozen=True, slots=True)
class Logs:
    """The components' log lines after one ComputeDomain was created and deleted at one verbosity."""

    controller: list[str]
    plugin: list[str]
    daemon: list[str]
    """The log of the domain's IMEX daemon, read while the domain was Ready."""
    domain: str
    daemon_env: dict[str, str]
    """The environment of the domain's daemon container, as the controller rendered it."""

    def events(self, component: str) -> list[dict[str, Any]]:
        """The component's log lines, decoded (klog's text layout: ``msg``, ``severity`` and the keys)."""
        lines: list[str] = getattr(self, component)
        return log_events(lines)

    def event(self, component: str, name: str) -> dict[str, Any]:
        """The component's first log line with event ``name``."""
        found = [e for e in self.events(component) if e.get("msg") == name]
        assert found, f"{component} logged no {name!r}"
        return found[0]


@pytest.fixture(scope="module")
def level0(quiet_rack: LocalCluster) -> Logs:
    """Logs at logVerbosity 0 (the rack's install)."""
    quiet_rack.create_namespace(NAMESPACE)
    return _cycle_domain(quiet_rack, "quiet")


@pytest.fixture(scope="module")
def level6(quiet_rack: LocalCluster, level0: Logs) -> Logs:
    """Logs at logVerbosity 6, after ``helm upgrade`` restarted the controller and the plugin."""
    before = {p["metadata"]["uid"] for p in _driver_pods(quiet_rack)}
    upgrade_chart(quiet_rack, {"logVerbosity": "6"})

    def restarted() -> bool:
        pods = _driver_pods(quiet_rack)
        # As many as before (the controller and one plugin per node), every one of them new.
        return len(pods) == len(before) and all(
            is_ready(p) and p["metadata"]["uid"] not in before for p in pods
        )

    wait_until("a new controller and new kubelet plugins Ready", restarted, timeout=120)
    return _cycle_domain(quiet_rack, "loud")


def test_controller_logs_its_configuration_at_level_0(level0: Logs) -> None:
    """The controller's startup lines carry the resolved configuration and feature gates."""
    text = "\n".join(level0.controller)
    for upstream in ("Verbosity", "additionalNamespaces", "maxNodesPerIMEXDomain", '"MPSSupport":false'):
        assert upstream in text
    config = level0.event("controller", "controller manager config")
    assert config["klogVerbosity"] == 0
    assert config["namespace"] == rack.DRIVER_NAMESPACE
    assert config["additionalNamespaces"] == []
    assert config["maxNodesPerIMEXDomain"] == 18
    assert config["leaderElection"] is True
    assert config["hostManagedIMEX"] is False
    gates = level0.event("controller", "Feature gates")["featureGates"]
    assert gates["HostManagedIMEX"] is False and gates["ComputeDomainCliques"] is True


def test_plugin_logs_its_configuration_at_level_0(level0: Logs) -> None:
    """The plugin's startup lines carry its flags, the clique it found and the driver version check."""
    text = "\n".join(level0.plugin)
    for upstream in ("Verbosity", "nodeName", "identified fabric clique", "driver version validation"):
        assert upstream in text
    flags = level0.event("plugin", "Flags")
    assert flags["klogVerbosity"] == 0
    assert flags["nodeName"] == NODE
    assert flags["imexMode"] == "driverManaged"
    assert level0.event("plugin", "Clique ID discovered")["clique_id"] == CLIQUE_ID
    assert "Driver version validation passed" in text
    assert level0.event("plugin", "Feature gates")["featureGates"]["HostManagedIMEX"] is False


def test_level_0_logs_per_domain_work_at_info_only(level0: Logs) -> None:
    """At level 0 a domain's status and finalization are logged, but no V(1+) detail or API request."""
    key = f"{NAMESPACE}/{level0.domain}"
    for component in ("controller", "plugin"):
        detail = {"Caches populated", REMOVING}  # the level-6 test's lines
        assert [e for e in level0.events(component) if e.get("msg") in detail] == [], component
        assert not any("HTTP Request:" in line for line in getattr(level0, component)), component
    assert level0.event("controller", "ComputeDomain status updated")["key"] == key
    assert level0.event("controller", "ComputeDomain finalized")["key"] == key
    assert level0.daemon_env["LOG_VERBOSITY"] == "0"


def test_level_6_adds_informer_finalizer_and_request_detail(level6: Logs) -> None:
    """At level 6 informer lists, per-domain teardown steps and API requests are logged too."""
    key = f"{NAMESPACE}/{level6.domain}"
    assert level6.event("controller", "controller manager config")["klogVerbosity"] == 6
    assert level6.event("plugin", "Flags")["klogVerbosity"] == 6
    listed = {e["resource"] for e in level6.events("controller") if e.get("msg") == "Caches populated"}
    assert listed == INFORMER_RESOURCES
    removing = [e for e in level6.events("controller") if e.get("msg") == REMOVING]
    assert removing and all(e["key"] == key for e in removing)
    assert any("HTTP Request: GET" in line and "computedomains" in line for line in level6.controller)
    assert any(
        e.get("msg") == "Caches populated" and e["resource"] == "ComputeDomain"
        for e in level6.events("plugin")
    )
    assert any("HTTP Request: GET" in line and "resourceslices" in line for line in level6.plugin)
    # Daemons of domains created after the change get the controller's new daemon verbosity.
    assert level6.daemon_env["LOG_VERBOSITY"] == "6"


def test_daemon_logs_at_the_verbosity_the_controller_gives_it(level0: Logs, level6: Logs) -> None:
    """LOG_VERBOSITY_CD_DAEMON as the daemon's own log shows it: the level on its start line, and at 6
    (not at 0) its informer's list and its API requests (labelling its pod, watching its clique)."""
    for logs, level in ((level0, 0), (level6, 6)):
        assert logs.event("daemon", "Starting compute-domain daemon")["klogVerbosity"] == level
        assert logs.event("daemon", "IMEX daemon started")["pid"] > 0
    assert not any("HTTP Request:" in line for line in level0.daemon)
    assert [e for e in level0.events("daemon") if e.get("msg") == "Caches populated"] == []
    listed = {e["resource"] for e in level6.events("daemon") if e.get("msg") == "Caches populated"}
    assert "ComputeDomainClique" in listed, listed
    assert any("HTTP Request: PATCH" in line and "/pods/" in line for line in level6.daemon)


def test_level_6_logs_the_controllers_api_writes(level6: Logs) -> None:
    """At level 6 the controller logs its writes too, e.g. creating the domain's ResourceClaimTemplate."""
    path = f"/namespaces/{NAMESPACE}/resourceclaimtemplates"
    assert any("POST" in line and path in line for line in level6.controller)


def _driver_pods(cluster: LocalCluster) -> list[dict[str, Any]]:
    return driver_pods(cluster, CONTROLLER_SELECTOR) + driver_pods(cluster, PLUGIN_SELECTOR)


def _cycle_domain(cluster: LocalCluster, name: str) -> Logs:
    """Create a ComputeDomain, wait for the controller to finish with it, delete it; return the logs."""
    template = f"{name}-channel"
    apply(cluster, compute_domain(name, NAMESPACE, template))
    wait_until(
        f"ComputeDomain {name} Ready",
        lambda: (
            get_json(cluster, "computedomain", name, "-n", NAMESPACE).get("status", {}).get("status")
            == "Ready"
        ),
        timeout=120,
    )
    uid = get_json(cluster, "computedomain", name, "-n", NAMESPACE)["metadata"]["uid"]
    daemon_set = get_json(cluster, "daemonset", f"computedomain-daemon-{uid}", "-n", rack.DRIVER_NAMESPACE)
    container = daemon_set["spec"]["template"]["spec"]["containers"][0]
    daemon_env = {e["name"]: e.get("value", "") for e in container.get("env", [])}
    # A pod with the domain's channel brings up the node's IMEX daemon, whose log is read once Ready.
    worker = f"{name}-worker"
    apply(cluster, channel_pod(worker, NAMESPACE, template, node=NODE))
    wait_until(f"{worker} Running", lambda: pod_phase(cluster, NAMESPACE, worker) == "Running", timeout=120)
    selector = f"{COMPUTE_DOMAIN_LABEL_KEY}={uid}"
    daemons = wait_until(
        "the domain's IMEX daemon Ready",
        lambda: [p for p in driver_pods(cluster, selector) if is_ready(p)] or None,
        timeout=120,
    )
    daemon_log = container_log(cluster, daemons[0])
    cluster.kubectl("delete", "pod", worker, "-n", NAMESPACE, "--wait=true", timeout=120)
    cluster.kubectl("delete", "computedomain", name, "-n", NAMESPACE, "--wait=true", timeout=120)
    (controller,) = [p for p in driver_pods(cluster, CONTROLLER_SELECTOR) if is_ready(p)]
    (plugin,) = [p for p in driver_pods(cluster, PLUGIN_SELECTOR) if p["spec"]["nodeName"] == NODE]
    return Logs(
        controller=container_log(cluster, controller),
        plugin=container_log(cluster, plugin),
        daemon=daemon_log,
        domain=name,
        daemon_env=daemon_env,
    )
