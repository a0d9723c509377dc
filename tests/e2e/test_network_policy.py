"""Network isolation on containerd nodes with a real NetworkPolicy enforcer (docs/tenancy.md, "Network").

A two-node driver-managed rack whose nodes each run kube-router's network policy controller
(``LocalCluster(network_policy=True)``, docs/node-runtime.md §10). Team ``team`` runs a ComputeDomain
over both nodes; pod ``outsider`` runs in another namespace on gb200-00, so it meets one daemon on its
own node (through the node's bridge) and one on the other node (routed across the fabric).

Each refusal is told apart from "nothing listens there" three ways: a peer daemon connects to the same
address and port just before and just after; the outsider itself reaches something else in the same
pod (the plugin's metrics port) or the API server, so its own network works; and the enforcer's REJECT
rule for the target pod counts the refused packets in its node's filter table.

Then a real network fault (docs/imex-health.md): the two daemons' IMEX traffic (TCP 50000) dropped on
gb200-01's forwarding path, both daemons staying Ready, each reports the other not connected, the
domain's IMEXPeersConnected turns False and ``imexdra diagnose`` names both directions; with the
packets flowing again it all clears. A real Prometheus beside the rack (``tests.support.prometheus``)
scrapes the driver's pods as the chart's PodMonitors select them and evaluates the chart's
PrometheusRule: IMEXPeerNotConnected fires for both nodes during the fault and clears after, each
within the bound docs/imex-health.md §5 states.
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from imexdra.api.constants import COMPUTE_DOMAIN_LABEL_KEY, IMEX_CMD_PORT, IMEX_SERVER_PORT
from imexdra_sim import rack
from imexdra_sim.builders import compute_domain
from imexdra_sim.localcluster import enforcer, netfault
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.e2e.helpers import PLUGIN_SELECTOR, driver_pods, is_ready, pod_phase
from tests.e2e.racks import NETWORK_POLICY
from tests.support import prometheus
from tests.support.builders import channel_pod
from tests.support.cli import imexdra
from tests.support.kubectl import apply, get_json
from tests.support.session import progress
from tests.support.waiting import wait_until
from tests.unit.chart.helm import merge, render

TEAM, OTHER = "team", "other-team"
OUTSIDER_NODE = "gb200-00"
STAND_IN = "docker.io/library/ubuntu:22.04"
HEALTH_PORT, METRICS_PORT = 51515, 8081
"""The plugin's gRPC health port (chart default) and its metrics port (the rack's values)."""
ALERT = "IMEXPeerNotConnected"
ALERT_FOR = "30s"
"""The alert's ``for`` here (the chart's default is 5m), set through the chart's own per-alert value."""
MONITORING_VALUES = {
    "metrics": {
        "podMonitor": {"enabled": True, "interval": "5s"},
        "prometheusRule": {"enabled": True, "alerts": {ALERT: {"for": ALERT_FOR}}},
    }
}
"""The chart's monitoring, on: rendered for the Prometheus beside the rack (the rack has no operator)."""
FIRING_BOUND = 150.0
"""Seconds from the fault to the alert firing: the daemons' poll (10 s) and report spacing (30 s), the
controller's roll-up (2 s), a scrape and two evaluations (5 s each), the rule's 30 s ``for``, and the
fake IMEX noticing the silent peer (docs/imex-health.md §5)."""
CLEARED_BOUND = 120.0
"""Seconds from the repair to the alert gone: the same path without the ``for``."""
CONNECT = "import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3).close()"
"""A TCP connect in the project's image (the daemons have python3, no nc)."""


@dataclass(frozen=True)
class Daemon:
    """One IMEX daemon pod of the team's domain."""

    name: str
    node: str
    ip: str


@dataclass(frozen=True)
class Domain:
    """The team's ComputeDomain: its UID and a daemon on each node."""

    uid: str
    daemons: dict[str, Daemon]

    def peer_of(self, daemon: Daemon) -> Daemon:
        """The domain's daemon on the other node."""
        return next(d for d in self.daemons.values() if d.node != daemon.node)


def worker(name: str, node: str) -> dict[str, Any]:
    """A stand-in workload pod holding the team's channel on ``node``."""
    return channel_pod(name, TEAM, "train-channel", node=node, image=STAND_IN, command=["sleep", "3600"])


def ready_daemons(cluster: LocalCluster, uid: str) -> dict[str, Daemon] | None:
    """The domain's daemons by node, once one is Ready on each node."""
    pods = [p for p in driver_pods(cluster, f"{COMPUTE_DOMAIN_LABEL_KEY}={uid}") if is_ready(p)]
    daemons = {
        p["spec"]["nodeName"]: Daemon(p["metadata"]["name"], p["spec"]["nodeName"], p["status"]["podIP"])
        for p in pods
    }
    return daemons if len(daemons) == len(cluster.nodes) else None


def domain_ready(cluster: LocalCluster) -> bool:
    """Whether the team's domain says Ready."""
    status = get_json(cluster, "computedomain", "train", "-n", TEAM).get("status") or {}
    return status.get("status") == "Ready"


def rules_on(cluster: LocalCluster, node: str) -> str:
    """The node's filter table with counters, as its enforcer made it."""
    assert cluster.binaries is not None
    return enforcer.filter_rules(cluster.node(node), cluster.binaries)


def rejected(cluster: LocalCluster, node: str, pod: str, namespace: str) -> int | None:
    """Packets the enforcer's REJECT rule for ``pod`` has refused on its node (None: no such rule)."""
    rule = re.search(
        rf"^\[(\d+):\d+\] .*rule to REJECT traffic destined for POD name:{re.escape(pod)} "
        rf"namespace: {re.escape(namespace)}\".* -j REJECT",
        rules_on(cluster, node),
        re.MULTILINE,
    )
    return int(rule.group(1)) if rule else None


def enforced(cluster: LocalCluster, daemon: Daemon, policy: str) -> bool:
    """Whether the daemon's node runs the daemon's traffic through ``policy`` and rejects the rest."""
    rules = rules_on(cluster, daemon.node)
    return f'"run through nw policy {policy}"' in rules and (
        rejected(cluster, daemon.node, daemon.name, rack.DRIVER_NAMESPACE) is not None
    )


def from_daemon(cluster: LocalCluster, daemon: Daemon, ip: str, port: int) -> bool:
    """Whether ``daemon`` opens a TCP connection to ``ip:port``."""
    argv = ("exec", "-n", rack.DRIVER_NAMESPACE, daemon.name, "--", "python3", "-c", CONNECT, ip, str(port))
    return cluster.kubectl(*argv, check=False).returncode == 0


def from_outsider(cluster: LocalCluster, ip: str, port: int) -> bool:
    """Whether the other team's pod opens a TCP connection to ``ip:port`` (3 s at most).

    busybox's nc has no ``-z``: ``-e true`` runs ``true`` on the connection and exits 0 once connected,
    1 when the connect fails.
    """
    argv = ("exec", "-n", OTHER, "outsider", "--", "nc", "-w", "3", ip, str(port), "-e", "true")
    return cluster.kubectl(*argv, check=False).returncode == 0


@pytest.fixture(scope="module")
def domain(network_policy_rack: LocalCluster) -> Domain:
    """The team's two-node domain, Ready, with its policy enforced on both nodes."""
    cluster = network_policy_rack
    cluster.create_namespace(TEAM)
    spec = compute_domain("train", TEAM, "train-channel")
    spec["spec"]["numNodes"] = len(cluster.nodes)
    apply(cluster, spec)
    uid = wait_until(
        "the domain's UID",
        lambda: get_json(cluster, "computedomain", "train", "-n", TEAM)["metadata"].get("uid"),
    )
    wait_until(
        "the channel claim template",
        lambda: (
            cluster.kubectl("get", "resourceclaimtemplate/train-channel", "-n", TEAM, check=False).returncode
            == 0
        ),
    )
    apply(cluster, *(worker(f"worker-{node.name}", node.name) for node in cluster.nodes))
    daemons: dict[str, Daemon] = wait_until(
        "a Ready IMEX daemon on each node", lambda: ready_daemons(cluster, uid), timeout=300
    )
    policy = f"computedomain-daemon-{uid}"
    for daemon in daemons.values():
        wait_until(
            f"{policy} enforced on {daemon.node}", functools.partial(enforced, cluster, daemon, policy)
        )
    return Domain(uid, daemons)


@pytest.fixture(scope="module")
def outsider(network_policy_rack: LocalCluster) -> Iterator[str]:
    """A pod of another namespace on gb200-00 with busybox's nc."""
    cluster = network_policy_rack
    cluster.create_namespace(OTHER)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "outsider", "namespace": OTHER},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": OUTSIDER_NODE},
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": STAND_IN, "command": ["sleep", "3600"]}],
        },
    }
    apply(cluster, pod)
    wait_until("the outsider Running", lambda: pod_phase(cluster, OTHER, "outsider") == "Running")
    yield "outsider"


def test_the_chart_and_the_controller_made_the_policies(
    network_policy_rack: LocalCluster, domain: Domain
) -> None:
    """The domain's policy (owned by its DaemonSet) and the plugin's ingress policy, driver namespace."""
    items = get_json(network_policy_rack, "networkpolicies", "-n", rack.DRIVER_NAMESPACE)["items"]
    policies = {p["metadata"]["name"]: p for p in items}
    name = f"computedomain-daemon-{domain.uid}"
    assert set(policies) == {name, f"{rack.RELEASE}-kubelet-plugin-ingress"}
    [owner] = policies[name]["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("DaemonSet", name)


def test_the_domains_daemons_reach_each_other_and_the_domain_is_ready(
    network_policy_rack: LocalCluster, domain: Domain
) -> None:
    """Under the enforced policy each daemon connects to its peer's IMEX ports, and the domain is Ready."""
    for daemon in domain.daemons.values():
        peer = domain.peer_of(daemon)
        for port in (IMEX_SERVER_PORT, IMEX_CMD_PORT):
            assert from_daemon(network_policy_rack, daemon, peer.ip, port), (
                f"{daemon.name} -> {peer.ip}:{port}"
            )
    wait_until("the domain Ready", lambda: domain_ready(network_policy_rack))


@pytest.mark.parametrize("port", [IMEX_SERVER_PORT, IMEX_CMD_PORT], ids=["server-port", "command-port"])
@pytest.mark.parametrize("node", ["gb200-00", "gb200-01"], ids=["same-node", "other-node"])
def test_a_pod_of_another_namespace_cannot_reach_a_daemon(
    network_policy_rack: LocalCluster, domain: Domain, outsider: str, node: str, port: int
) -> None:
    """The outsider is refused by the enforcer's rule; the daemon's peer gets through, before and after."""
    cluster, target = network_policy_rack, domain.daemons[node]
    peer = domain.peer_of(target)
    assert from_daemon(cluster, peer, target.ip, port), "the peer must reach it first: it listens"
    before = rejected(cluster, node, target.name, rack.DRIVER_NAMESPACE)
    assert before is not None
    assert not from_outsider(cluster, target.ip, port)
    after = rejected(cluster, node, target.name, rack.DRIVER_NAMESPACE)
    assert after is not None and after > before, "the enforcer's REJECT rule for the daemon refused it"
    assert from_daemon(cluster, peer, target.ip, port), "and the peer still gets through"


@pytest.mark.parametrize("node", ["gb200-00", "gb200-01"], ids=["same-node", "other-node"])
def test_a_pod_cannot_reach_the_plugins_health_port(
    network_policy_rack: LocalCluster, domain: Domain, outsider: str, node: str
) -> None:
    """The plugin's gRPC health port refuses the outsider, its metrics port answers it, and the kubelet's
    probes of the health port keep the plugin Ready."""
    cluster = network_policy_rack
    [plugin] = [p for p in driver_pods(cluster, PLUGIN_SELECTOR) if p["spec"]["nodeName"] == node]
    name, ip = plugin["metadata"]["name"], plugin["status"]["podIP"]
    wait_until(
        f"the plugin's ingress policy enforced on {node}",
        lambda: rejected(cluster, node, name, rack.DRIVER_NAMESPACE) is not None,
    )
    assert from_outsider(cluster, ip, METRICS_PORT), "the outsider reaches the plugin pod's metrics port"
    before = rejected(cluster, node, name, rack.DRIVER_NAMESPACE)
    assert before is not None
    assert not from_outsider(cluster, ip, HEALTH_PORT)
    after = rejected(cluster, node, name, rack.DRIVER_NAMESPACE)
    assert after is not None and after > before, "the enforcer's REJECT rule for the plugin refused it"
    [now] = [p for p in driver_pods(cluster, PLUGIN_SELECTOR) if p["metadata"]["name"] == name]
    assert is_ready(now) and now["status"]["containerStatuses"][0]["restartCount"] == 0


def imex_peers(cluster: LocalCluster) -> tuple[dict[str, Any], dict[str, Any]]:
    """The team's domain: each node's ``imexPeers`` and the ``IMEXPeersConnected`` condition."""
    status = get_json(cluster, "computedomain", "train", "-n", TEAM).get("status") or {}
    reports = {n["name"]: n["imexPeers"] for n in status.get("nodes", []) if "imexPeers" in n}
    condition = next((c for c in status.get("conditions", []) if c["type"] == "IMEXPeersConnected"), {})
    return reports, condition


def all_connected(cluster: LocalCluster) -> bool:
    """Both nodes report their one peer connected, and the condition is True."""
    reports, condition = imex_peers(cluster)
    healthy = {"connected": 1, "expected": 1}
    return reports == {n.name: healthy for n in cluster.nodes} and condition.get("status") == "True"


def cut_off(cluster: LocalCluster) -> dict[str, Any] | None:
    """The condition once each node reports the other not connected (and the status says so)."""
    reports, condition = imex_peers(cluster)
    other = {"gb200-00": "gb200-01", "gb200-01": "gb200-00"}
    lost = all(
        [link["nodeName"] for link in reports.get(node, {}).get("notConnected", [])] == [peer]
        for node, peer in other.items()
    )
    named = all(f"{node} cannot reach {peer}" in condition.get("message", "") for node, peer in other.items())
    return condition if lost and named and condition.get("status") == "False" else None


def monitoring_objects() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The PodMonitors and the rule groups of the PrometheusRule the rack's release renders with
    monitoring on (the same release name, namespace and values, so selectors and ports match)."""
    values = merge(rack.chart_values(NETWORK_POLICY), MONITORING_VALUES)
    rendered = render(values, release=rack.RELEASE, namespace=rack.DRIVER_NAMESPACE)
    groups = [group for rule in rendered.of_kind("PrometheusRule") for group in rule["spec"]["groups"]]
    return rendered.of_kind("PodMonitor"), groups


def scraped(server: prometheus.Prometheus, cluster: LocalCluster) -> bool:
    """Whether the controller and every node's kubelet plugin are healthy targets, and the peer
    gauges of both nodes are in."""
    pods = sorted(pod for pods in server.targets_up().values() for pod in pods)
    plugins = [pod for pod in pods if "kubelet-plugin" in pod]
    controllers = [pod for pod in pods if "controller" in pod]
    gauges = server.query(f'imexdra_imex_peers_expected{{namespace="{TEAM}", compute_domain="train"}}')
    return len(plugins) == len(cluster.nodes) and len(controllers) == 1 and len(gauges) == len(cluster.nodes)


def alert_nodes(server: prometheus.Prometheus, state: str) -> set[str]:
    """The nodes of the team's domain for which the alert is in ``state``."""
    return {
        labels["node"]
        for labels in server.alerts(ALERT, state)
        if (labels.get("namespace"), labels.get("compute_domain")) == (TEAM, "train")
    }


def test_a_dropped_link_between_the_daemons_shows_and_heals(
    pytestconfig: pytest.Config, network_policy_rack: LocalCluster, domain: Domain
) -> None:
    """IMEX traffic between the two daemons dropped: each reports the other, the condition is False and
    diagnose names the pairs while both daemons stay Ready, and Prometheus fires IMEXPeerNotConnected
    for both nodes; restored, all Connected and True again and the alert gone."""
    cluster = network_policy_rack
    assert cluster.binaries is not None
    wait_until("both daemons report their peer connected", lambda: all_connected(cluster), timeout=180)
    pod_monitors, rule_groups = monitoring_objects()
    with prometheus.running(cluster, pod_monitors=pod_monitors, rule_groups=rule_groups) as server:
        wait_until("Prometheus scraping the driver's pods", lambda: scraped(server, cluster), timeout=60)
        assert alert_nodes(server, "pending") | alert_nodes(server, "firing") == set()
        healed = _drop_the_link(cluster, domain, server, pytestconfig)
        wait_until(
            f"{ALERT} cleared for both nodes",
            lambda: not alert_nodes(server, "pending") | alert_nodes(server, "firing"),
            timeout=CLEARED_BOUND,
        )
        progress(pytestconfig, f"{ALERT} cleared {time.monotonic() - healed:.0f} s after the repair")
    wait_until("both daemons report their peer connected again", lambda: all_connected(cluster), timeout=180)


def _drop_the_link(
    cluster: LocalCluster, domain: Domain, server: prometheus.Prometheus, config: pytest.Config
) -> float:
    """The fault and what it must show; returns when (monotonic) the link came back."""
    assert cluster.binaries is not None
    victim, peer = domain.daemons["gb200-01"], domain.daemons["gb200-00"]
    with netfault.dropped(cluster.node(victim.node), cluster.binaries, victim.ip, peer.ip, IMEX_SERVER_PORT):
        dropped = time.monotonic()
        nodes = {node.name for node in cluster.nodes}
        wait_until(
            f"{ALERT} firing for both nodes",
            lambda: alert_nodes(server, "firing") == nodes,
            timeout=FIRING_BOUND,
        )
        progress(config, f"{ALERT} firing {time.monotonic() - dropped:.0f} s after the fault")
        condition = wait_until(
            "each daemon reports the other not connected", lambda: cut_off(cluster), timeout=180
        )
        assert condition["reason"] == "PeersNotConnected"
        assert not from_daemon(cluster, peer, victim.ip, IMEX_SERVER_PORT), "the link really is down"
        assert ready_daemons(cluster, domain.uid) is not None, "IMEX readiness is local: both stay Ready"
        diagnosis = imexdra(cluster, "diagnose", "train", "-n", TEAM)
        assert diagnosis.returncode == 1
        for a, b in (("gb200-00", "gb200-01"), ("gb200-01", "gb200-00")):
            assert f"IMEX daemon on {a} cannot reach {b}" in diagnosis.stdout
    healed = time.monotonic()
    assert from_daemon(cluster, peer, victim.ip, IMEX_SERVER_PORT)
    return healed
