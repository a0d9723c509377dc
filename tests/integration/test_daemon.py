"""compute-domain-daemon on the real control plane: four daemons form one IMEX domain and heal.

Real: apiserver, DaemonSet controller, scheduler and the kubelets of node-0..node-3, which run every
daemon pod as a host process (``compute-domain-daemon run`` from this venv, in its own mount namespace,
with its own loopback pod IP) and run its readiness probe ``compute-domain-daemon check`` for real; the
controller (the real ``compute-domain-controller`` entry point, with its own RBAC) publishing the
ComputeDomainClique from the pods; the daemons authenticating as their ServiceAccount, which holds
only the chart's daemon rules (patch pods, list/watch cliques).

Stand-ins, each doing only what the real part would: the fake ``nvidia-imex``/``nvidia-imex-ctl``
(the hardware boundary) put on the pods' PATH; the test's DaemonSet instead of the controller-rendered
one, because the kubelet plugin's CDI injection (``CLIQUE_ID``, ``COMPUTE_DOMAIN_*``, the ``/imexd``
mount) is written into the pod template directly, and a test node label instead of the plugin's; a
kubeconfig with the pod's ServiceAccount token file in place of the in-cluster config (the service IP
10.0.0.1 is not routable here); ``IMEXD_HOSTS_FILE``/``FAKE_IMEX_HOSTS_FILE`` point daemon and fake at
``/imexd/hosts``, so nothing ever touches the machine's ``/etc/hosts``.

Aspects, in order (the tests share one domain): formation (all daemons Ready, clique, hosts file,
ComputeDomain Ready); membership churn (a node leaves and comes back: node list and hosts updated, IMEX
reloaded by SIGUSR1, never restarted); a killed nvidia-imex restarted by its daemon; a stopped
nvidia-imex that its peers cannot reach over TCP any more, shown per node in the clique and as the
domain's IMEXPeersConnected condition, and cleared once it runs again; a force-deleted
daemon pod replaced and the domain Ready again; whole daemon containers SIGKILLed at seeded random
moments, restarted by their kubelets, the domain converging each time with no orphan left (size
``IMEXDRA_DAEMON_KILLS``, seed ``IMEXDRA_SEED``); a daemon on a node without a fabric (empty clique ID)
running no IMEX yet Ready and listed with index -1.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hashlib
import os
import random
import secrets
import signal
import statistics
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from imexdra.api.constants import CLIQUE_LABEL_KEY, COMPUTE_DOMAIN_LABEL_KEY
from imexdra.common.kube.api import PatchType
from imexdra.common.kube.kubeclient import KubeClient
from imexdra.common.kube.models.core_v1 import Node, Pod
from imexdra.common.observability.logformat import parse_line
from imexdra.daemon.hostsfile import managed_mappings
from imexdra.devices.imex import parse_config
from imexdra_sim.builders import compute_domain_model
from imexdra_sim.devices.fakeimex.ctl import CtlError, fetch_status
from imexdra_sim.devices.fakeimex.install import install_fake_imex
from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.localcluster.nodes import GPU_NODE_LABELS, NodeSpec
from tests.integration.controller_harness import (
    DAEMON_SERVICE_ACCOUNT,
    controller_running,
)
from tests.support.hostprocess import HOST_IMAGE, HOST_SRV
from tests.support.kubectl import apply, get_json
from tests.support.session import progress
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

SUFFIX = secrets.token_hex(3)
DRIVER_NS = f"imexdra-dmn-{SUFFIX}"
USER_NS = f"cd-dmn-{SUFFIX}"
APP = f"imex-daemons-{SUFFIX}"
NODE_LABEL = f"imexdra.test/imex-daemons-{SUFFIX}"
CLIQUE = "6b0e2f4a-9c1d-4e7f-8a2b-3c4d5e6f7a8b.3"
NODES = ("node-0", "node-1", "node-2", "node-3")
CMD_PORT = 50005
#: Where the hosts file points a slot without a daemon (upstream #1465).
SENTINEL = "127.0.0.2"
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# Size of test_sigkilled_daemons_recover: 4 in CI (one kill per node, each restarted at once); `make soak`
# sets >= 20. What bounds it is the kubelet's CrashLoopBackOff, kept per container: a daemon's k-th kill
# (k >= 2) waits 10 s * 2^(k-2) (at most 300 s) before its restart, unless the container ran 10 minutes.
# Kills rotate over the four nodes, so 20 kills cost 4 * (10 + 20 + 40 + 80) s = 10 min of backoff and
# about 15 min in all; past 24 the rounds outlast 10 minutes, backoffs reset, and time grows ~1 min per kill.
DAEMON_KILLS = int(os.environ.get("IMEXDRA_DAEMON_KILLS", "4"))
SEED = int(os.environ.get("IMEXDRA_SEED", str(secrets.randbits(32))))
#: The daemons' IMEX-health poll (seconds), short so reports settle and repeat within the test.
PEERS_POLL_INTERVAL = "1"
# A restarted daemon is Ready with all peers connected some 3 s after its container starts (here);
# a kill not waiting for the domain to settle comes within this long after that start.
STARTUP_SECONDS = 2.0


@dataclass
class Domain:
    """The ComputeDomain under test and where its daemons keep their files."""

    cluster: LocalCluster
    uid: str
    fake_bin: Path

    def imexd(self, node: str) -> Path:
        return self.cluster.node(node).host_dir / "srv" / f"imexd-{SUFFIX}"


async def add_missing_nodes(cluster: LocalCluster) -> None:
    """Grow the session cluster to four real nodes; the extra ones are tainted so only we use them."""
    have = {node.name for node in cluster.nodes}
    specs = [
        NodeSpec(
            name=name,
            labels={**GPU_NODE_LABELS, "nvidia.com/gpu.clique": "test-cluster.0"},
            pod_cidr=f"127.100.{int(name[-1]) + 1}.0/24",
        )
        for name in NODES
        if name not in have
    ]
    if specs:
        await asyncio.to_thread(cluster.add_nodes, specs)
        for spec in specs:
            cluster.kubectl(
                "taint", "node", spec.name, "imexdra.test/extra-node=true:NoSchedule", "--overwrite"
            )


def daemon_rbac() -> list[dict[str, Any]]:
    """The chart's daemon Role (cliques gate on) bound to the daemon ServiceAccount."""
    name = f"imexdra-daemon-{SUFFIX}"
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": name, "namespace": DRIVER_NS},
            "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["patch"]},
                {
                    "apiGroups": ["resource.nvidia.com"],
                    "resources": ["computedomaincliques"],
                    "verbs": ["list", "watch"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": name, "namespace": DRIVER_NS},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": DAEMON_SERVICE_ACCOUNT, "namespace": DRIVER_NS}],
        },
    ]


def kubeconfig_map(cluster: LocalCluster) -> dict[str, Any]:
    """A kubeconfig authenticating with the pod's own ServiceAccount token, as a ConfigMap."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "local",
                "cluster": {"server": cluster.apiserver_url, "certificate-authority": f"{SA_DIR}/ca.crt"},
            }
        ],
        "users": [{"name": "daemon", "user": {"tokenFile": f"{SA_DIR}/token"}}],
        "contexts": [{"name": "daemon", "context": {"cluster": "local", "user": "daemon"}}],
        "current-context": "daemon",
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "daemon-kubeconfig", "namespace": DRIVER_NS},
        "data": {"kubeconfig": yaml.safe_dump(config)},
    }


def field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def daemon_pod_spec(*, uid: str, cd_name: str, clique: str, imexd: str, fake_bin: Path) -> dict[str, Any]:
    """A daemon pod's spec, with what the kubelet plugin's CDI would inject written in directly."""
    env = [
        {"name": "MAX_NODES_PER_IMEX_DOMAIN", "value": "18"},
        field_env("NODE_NAME", "spec.nodeName"),
        field_env("POD_IP", "status.podIP"),
        field_env("POD_UID", "metadata.uid"),
        field_env("POD_NAME", "metadata.name"),
        field_env("POD_NAMESPACE", "metadata.namespace"),
        {"name": "FEATURE_GATES", "value": ""},
        {"name": "CLIQUE_ID", "value": clique},
        {"name": "COMPUTE_DOMAIN_UUID", "value": uid},
        {"name": "COMPUTE_DOMAIN_NAME", "value": cd_name},
        {"name": "COMPUTE_DOMAIN_NAMESPACE", "value": USER_NS},
        {"name": "KUBECONFIG", "value": "/etc/imexdra-daemon/kubeconfig"},
        {"name": "IMEXD_HOSTS_FILE", "value": "/imexd/hosts"},
        {"name": "FAKE_IMEX_HOSTS_FILE", "value": "/imexd/hosts"},
        {"name": "FAKE_IMEX_PROBE_INTERVAL", "value": "1"},
        {"name": "IMEX_PEERS_POLL_INTERVAL", "value": PEERS_POLL_INTERVAL},
        {"name": "LOGGING_FORMAT", "value": "json"},
        {"name": "PATH", "value": f"{fake_bin}:/usr/local/bin:/usr/bin:/bin"},
    ]
    container = {
        "name": "compute-domain-daemon",
        "image": HOST_IMAGE,
        "command": ["compute-domain-daemon", "-v", "4", "run"],
        "env": env,
        "readinessProbe": {
            "exec": {"command": ["compute-domain-daemon", "check"]},
            "periodSeconds": 5,
            "timeoutSeconds": 10,
            "failureThreshold": 1,
        },
        "volumeMounts": [
            {"name": "imexd", "mountPath": "/imexd"},
            {"name": "kubeconfig", "mountPath": "/etc/imexdra-daemon", "readOnly": True},
        ],
    }
    return {
        "serviceAccountName": DAEMON_SERVICE_ACCOUNT,
        "tolerations": [{"operator": "Exists"}],
        "terminationGracePeriodSeconds": 15,
        "containers": [container],
        "volumes": [
            {"name": "imexd", "hostPath": {"path": f"{HOST_SRV}/{imexd}", "type": "DirectoryOrCreate"}},
            {"name": "kubeconfig", "configMap": {"name": "daemon-kubeconfig"}},
        ],
    }


def daemon_set(
    name: str, pod_spec: dict[str, Any], uid: str, node_selector: dict[str, str]
) -> dict[str, Any]:
    """Daemon pods of domain ``uid``, owned by this DaemonSet (else the controller's adopts them)."""
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": DRIVER_NS},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name, COMPUTE_DOMAIN_LABEL_KEY: uid}},
                "spec": {**pod_spec, "nodeSelector": node_selector},
            },
        },
    }


async def set_node_label(kube: KubeClient, node: str, on: bool) -> None:
    """Schedule (or evict) the daemon on ``node``, as the kubelet plugin's node label would."""
    patch = {"metadata": {"labels": {NODE_LABEL: "true" if on else None}}}
    await kube.patch(Node, node, patch, patch_type=PatchType.MERGE)


@pytest.fixture(scope="module")
async def domain(cluster: LocalCluster, kube: KubeClient, compute_domain_crds: None) -> AsyncIterator[Domain]:
    """Four nodes, the controller, a ComputeDomain (numNodes 4) and its daemons scheduled everywhere."""
    await add_missing_nodes(cluster)
    # The controller spaces health publications by the daemons' poll interval: tell it the test's.
    poll = f"--cd-daemon-imex-peers-poll-interval={PEERS_POLL_INTERVAL}"
    async with controller_running(
        cluster, DRIVER_NS, USER_NS, f"controller-dmn-{SUFFIX}", extra_args=(poll,)
    ):
        created = await kube.create(compute_domain_model("imex", USER_NS, num_nodes=4))
        assert created.metadata is not None and created.metadata.uid
        uid = created.metadata.uid
        assert cluster.run_dir is not None
        fake_bin = install_fake_imex(cluster.run_dir / f"fake-imex-{SUFFIX}").directory
        spec = daemon_pod_spec(
            uid=uid, cd_name="imex", clique=CLIQUE, imexd=f"imexd-{SUFFIX}", fake_bin=fake_bin
        )
        daemons = daemon_set(APP, spec, uid, {NODE_LABEL: "true"})
        apply(cluster, *daemon_rbac(), kubeconfig_map(cluster), daemons)
        for node in NODES:
            await set_node_label(kube, node, True)
        yield Domain(cluster, uid, fake_bin)
        for node in NODES:
            await set_node_label(kube, node, False)
        cluster.kubectl("delete", "daemonset", APP, "-n", DRIVER_NS, "--timeout=60s")


# -- observing the domain ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Member:
    """One daemon as the test sees it: its pod and the IMEX process it supervises."""

    pod: str
    ip: str
    restarts: int
    imex_pid: int
    reloads: int


def is_ready(pod: Pod) -> bool:
    status = pod.status
    return bool(status and any(c.type == "Ready" and c.status == "True" for c in status.conditions or ()))


def imex_status(ip: str) -> dict[str, Any] | None:
    try:
        return fetch_status((ip, CMD_PORT))
    except CtlError:
        return None


async def live_pods(kube: KubeClient) -> dict[str, Pod]:
    """The daemon pods that are not terminating, by node."""
    pods = {}
    async for pod in kube.list(Pod, namespace=DRIVER_NS, labels={"app": APP}):
        if pod.metadata and pod.metadata.deletionTimestamp is None and pod.spec and pod.spec.nodeName:
            pods[pod.spec.nodeName] = pod
    return pods


async def converged(kube: KubeClient, nodes: tuple[str, ...]) -> dict[str, Member] | None:
    """Members by node once exactly ``nodes`` have Ready daemons whose IMEX sees all of them connected."""
    pods = await live_pods(kube)
    if set(pods) != set(nodes) or not all(is_ready(p) for p in pods.values()):
        return None
    members = {}
    for node, pod in pods.items():
        assert pod.status is not None and pod.metadata is not None
        status = imex_status(pod.status.podIP or "")
        if status is None or status["state"] != "READY":
            return None
        resolved = [n for n in status["nodes"] if n["address"] not in (None, SENTINEL)]
        if sorted(n["address"] for n in resolved) != sorted(
            p.status.podIP or "" for p in pods.values() if p.status
        ):
            return None
        restarts = sum(c.restartCount for c in pod.status.containerStatuses or ())
        members[node] = Member(
            pod.metadata.name or "", pod.status.podIP or "", restarts, status["pid"], status["reloads"]
        )
    return members


def clique_entries(domain: Domain) -> dict[str, dict[str, Any]]:
    """The controller-written clique entries by node name."""
    items = get_json(domain.cluster, "computedomaincliques", "-n", DRIVER_NS)["items"]
    for item in items:
        if item["metadata"]["name"] == f"{domain.uid}.{CLIQUE}":
            return {entry["nodeName"]: entry for entry in item.get("daemons", [])}
    return {}


def hosts_of(domain: Domain, node: str) -> dict[str, str]:
    path = domain.imexd(node) / "hosts"
    return managed_mappings(path.read_text()) if path.exists() else {}


def expected_hosts(domain: Domain, entries: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Every one of the 18 slots, named as upstream #1448 does: the entries' at their IPs, the rest at
    the sentinel; the domain hash is the first 8 hex digits of SHA-256 of the domain's UID."""
    prefix = f"compute-domain-daemon-{hashlib.sha256(domain.uid.encode()).hexdigest()[:8]}-"
    hosts = {f"{prefix}{index:04d}": SENTINEL for index in range(18)}
    hosts.update({f"{prefix}{e['index']:04d}": e["ipAddress"] for e in entries.values()})
    return hosts


async def wait_converged(kube: KubeClient, nodes: tuple[str, ...], what: str) -> dict[str, Member]:
    result: dict[str, Member] = await eventually(
        what, lambda: converged(kube, nodes), within=240, interval=2.0
    )
    return result


def daemon_log(domain: Domain, node: str, pod: str) -> list[dict[str, Any]]:
    """The daemon's log lines (klog text or JSON), read from the node's CRI container logs (all restarts)."""
    pod_logs = domain.cluster.node(node).directory / "pod-logs"
    events = []
    for path in sorted(pod_logs.glob(f"{DRIVER_NS}_{pod}_*/compute-domain-daemon/*.log")):
        for line in path.read_text(errors="replace").splitlines():
            entry = parse_line(line.split(" ", 3)[-1])  # "<time> <stream> <tag> <text>"
            if entry is not None:  # IMEX's own lines and other output are not log lines
                events.append(entry)
    return events


# -- the tests ---------------------------------------------------------------------------------------


async def test_daemons_form_a_ready_domain(domain: Domain, kube: KubeClient) -> None:
    """Four daemons become Ready; the clique, the hosts files and the ComputeDomain all agree."""
    members = await wait_converged(kube, NODES, "four Ready daemons with connected IMEX")
    entries = await eventually(
        "clique lists four Ready daemons", lambda: _all_ready_entries(domain, 4), within=60
    )
    assert sorted(e["index"] for e in entries.values()) == [0, 1, 2, 3]
    assert {node: e["ipAddress"] for node, e in entries.items()} == {n: m.ip for n, m in members.items()}
    pods = await live_pods(kube)
    assert {
        p.metadata.labels[CLIQUE_LABEL_KEY] for p in pods.values() if p.metadata and p.metadata.labels
    } == {CLIQUE}
    for node in NODES:
        assert hosts_of(domain, node) == expected_hosts(domain, entries)
        imexd = domain.imexd(node)
        assert len((imexd / "nodes.cfg").read_text().splitlines()) == 18
        assert (
            parse_config((imexd / "imexd.cfg").read_text())["IMEX_CMD_BIND_INTERFACE_IP"] == members[node].ip
        )
    cd = get_json(domain.cluster, "computedomain", "imex", "-n", USER_NS)
    await eventually("ComputeDomain Ready", lambda: _cd_status(domain) == "Ready", within=60)
    assert cd["metadata"]["uid"] == domain.uid
    assert all(m.restarts == 0 for m in members.values())


def _cd_status(domain: Domain) -> str:
    cd = get_json(domain.cluster, "computedomain", "imex", "-n", USER_NS)
    return str(cd.get("status", {}).get("status", ""))


def _all_ready_entries(domain: Domain, count: int) -> dict[str, dict[str, Any]] | None:
    entries = clique_entries(domain)
    return (
        entries if len(entries) == count and all(e["status"] == "Ready" for e in entries.values()) else None
    )


async def test_membership_churn_reloads_without_restart(domain: Domain, kube: KubeClient) -> None:
    """A node leaving and rejoining rewrites the hosts files and reloads IMEX by SIGUSR1, same PIDs."""
    before = await wait_converged(kube, NODES, "domain converged")
    index_of_leaver = clique_entries(domain)["node-3"]["index"]
    await set_node_label(kube, "node-3", False)
    survivors = NODES[:3]
    shrunk = await wait_converged(kube, survivors, "three daemons after node-3 left")
    for node in survivors:
        assert shrunk[node].imex_pid == before[node].imex_pid, f"IMEX on {node} was restarted"
        assert shrunk[node].reloads > before[node].reloads, f"IMEX on {node} was not reloaded"
        assert len([ip for ip in hosts_of(domain, node).values() if ip != SENTINEL]) == 3
    await set_node_label(kube, "node-3", True)
    grown = await wait_converged(kube, NODES, "four daemons after node-3 rejoined")
    for node in survivors:
        assert grown[node].imex_pid == before[node].imex_pid, f"IMEX on {node} was restarted"
        assert grown[node].reloads > shrunk[node].reloads
        assert grown[node].restarts == 0
    assert grown["node-3"].pod != before["node-3"].pod
    assert clique_entries(domain)["node-3"]["index"] == index_of_leaver
    for node in NODES:
        assert hosts_of(domain, node) == expected_hosts(domain, clique_entries(domain))


async def test_killed_imex_is_restarted_by_its_daemon(domain: Domain, kube: KubeClient) -> None:
    """SIGKILLing nvidia-imex makes its daemon start a new one; the pod itself is not restarted."""
    before = await wait_converged(kube, NODES, "domain converged")
    victim = before["node-1"]
    os.kill(victim.imex_pid, signal.SIGKILL)
    after = await wait_converged(kube, NODES, "domain converged after the IMEX kill")
    assert after["node-1"].imex_pid != victim.imex_pid
    assert (after["node-1"].pod, after["node-1"].restarts) == (victim.pod, victim.restarts)
    events = [e.get("msg") for e in daemon_log(domain, "node-1", victim.pod)]
    assert "IMEX daemon exited" in events and events.count("IMEX daemon started") >= 2


def _peer_reports(domain: Domain) -> dict[str, dict[str, Any]]:
    """Each clique entry's ``imexPeers``, by node (entries without a report are left out)."""
    return {node: e["imexPeers"] for node, e in clique_entries(domain).items() if "imexPeers" in e}


def _peers_condition(domain: Domain) -> dict[str, Any]:
    cd = get_json(domain.cluster, "computedomain", "imex", "-n", USER_NS)
    conditions = cd.get("status", {}).get("conditions", [])
    return next((c for c in conditions if c["type"] == "IMEXPeersConnected"), {})


def _all_connected(domain: Domain) -> bool:
    reports = _peer_reports(domain)
    return (
        set(reports) == set(NODES)
        and all(r == {"connected": 3, "expected": 3} for r in reports.values())
        and _peers_condition(domain).get("status") == "True"
    )


def _cannot_reach(domain: Domain, victim: str) -> dict[str, Any] | None:
    """The condition once every other node reports ``victim`` as not connected (and only it)."""
    reports = _peer_reports(domain)
    others = [node for node in NODES if node != victim]
    if not all(
        reports.get(node, {}).get("notConnected") == [{"nodeName": victim, "state": "R"}] for node in others
    ):
        return None
    # The status rolls the cliques up at most every 2 s: wait until it names every pair too.
    condition = _peers_condition(domain)
    named = all(f"{node} cannot reach {victim}" in condition.get("message", "") for node in others)
    return condition if condition.get("status") == "False" and named else None


async def test_unreachable_imex_peer_shows_in_status_and_clears(domain: Domain, kube: KubeClient) -> None:
    """A stopped nvidia-imex stops answering its peers' TCP probes: each survivor reports it as
    Recovering in the clique, the domain's IMEXPeersConnected turns False naming the pairs (and a
    Warning event says so); running again, it is Connected everywhere and the condition True."""
    before = await wait_converged(kube, NODES, "domain converged")
    await eventually("every daemon reports 3 of 3 peers connected", lambda: _all_connected(domain), within=90)
    victim = before["node-2"]
    os.kill(victim.imex_pid, signal.SIGSTOP)
    try:
        condition = await eventually(
            "node-2 reported not connected by the other three",
            lambda: _cannot_reach(domain, "node-2"),
            within=90,
        )
        assert condition["reason"] == "PeersNotConnected"
        for node in ("node-0", "node-1", "node-3"):
            assert f"{node} cannot reach node-2 (R: recovering" in condition["message"]
        events = get_json(
            domain.cluster, "events", "-n", USER_NS, "--field-selector", "reason=IMEXPeersNotConnected"
        )["items"]
        assert any("cannot reach node-2" in e.get("message", "") for e in events)
    finally:
        os.kill(victim.imex_pid, signal.SIGCONT)
    await eventually("all peers connected again", lambda: _all_connected(domain), within=90)
    after = await wait_converged(kube, NODES, "domain converged after IMEX continued")
    assert after["node-2"].imex_pid == victim.imex_pid  # nothing was restarted: the report cleared by itself
    condition = _peers_condition(domain)
    assert condition["reason"] == "AllPeersConnected"


async def test_force_deleted_daemon_pod_recovers(domain: Domain, kube: KubeClient) -> None:
    """A daemon pod deleted with no grace is replaced on its node, keeps its index, and all are Ready."""
    before = await wait_converged(kube, NODES, "domain converged")
    index = clique_entries(domain)["node-2"]["index"]
    domain.cluster.kubectl(
        "delete", "pod", before["node-2"].pod, "-n", DRIVER_NS, "--grace-period=0", "--force"
    )
    after = await wait_converged(kube, NODES, "domain converged after the pod was replaced")
    assert after["node-2"].pod != before["node-2"].pod
    entries = clique_entries(domain)
    assert entries["node-2"]["index"] == index
    assert entries["node-2"]["ipAddress"] == after["node-2"].ip
    for node in NODES:
        assert hosts_of(domain, node) == expected_hosts(domain, entries)
    await eventually("ComputeDomain Ready again", lambda: _cd_status(domain) == "Ready", within=60)


@dataclass(frozen=True)
class HostProcess:
    """A live process of this host, as /proc shows it."""

    pid: int
    ppid: int
    pgid: int
    argv: tuple[str, ...]
    env: dict[str, str]

    @property
    def is_daemon(self) -> bool:
        """``compute-domain-daemon ... run`` (not a ``check`` probe)."""
        return "run" in self.argv and any(a.endswith("compute-domain-daemon") for a in self.argv)

    @property
    def is_imex(self) -> bool:
        """The fake ``nvidia-imex`` (a zip application: its interpreter runs the program's path)."""
        return any(a == "nvidia-imex" or a.endswith("/nvidia-imex") for a in self.argv[:2])


def host_processes() -> list[HostProcess]:
    """Every live (not zombie) process we may inspect."""
    processes = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            environ = (entry / "environ").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue  # gone meanwhile, or not ours
        if stat[0] == "Z":
            continue
        env = dict(kv.split("=", 1) for kv in environ if "=" in kv)
        processes.append(HostProcess(int(entry.name), int(stat[1]), int(stat[2]), tuple(argv), env))
    return processes


def container_pid(domain: Domain, node: str, pod_uid: str) -> int | None:
    """PID of the pod's latest started daemon container, from fakecri's record of ``node``."""
    records = domain.cluster.node(node).cri_records()
    ours = {
        r["container_id"] for r in records if r["event"] == "CreateContainer" and r.get("pod_uid") == pod_uid
    }
    starts = [r["pid"] for r in records if r["event"] == "StartContainer" and r["container_id"] in ours]
    return int(starts[-1]) if starts else None


def kill_container(pid: int) -> int:
    """SIGKILL a host-process container as a runtime kills its cgroup; return how many processes died.

    fakecri starts a container's main process as the leader of a new process group, which its children
    (nvidia-imex, nvidia-imex-ctl) inherit; any descendant that left the group is killed too. Only the
    kubelet's exec probes escape: fakecri runs them beside the container, and they end on their own.
    """
    processes = host_processes()
    tree = {pid}
    while grown := {p.pid for p in processes if p.ppid in tree} - tree:
        tree |= grown
    victims = tree | {p.pid for p in processes if p.pgid == pid}
    os.killpg(pid, signal.SIGKILL)
    for victim in victims - {pid}:
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim, signal.SIGKILL)
    return len(victims)


def kill_order(rng: random.Random, kills: int) -> list[str]:
    """Rounds of seeded permutations of the nodes, so each daemon's backoff grows as slowly as can be.

    A round sometimes begins with the previous round's last victim, so that a kill without waiting for
    the domain to settle can hit a daemon during its own startup.
    """
    order: list[str] = []
    while len(order) < kills:
        nodes = list(NODES)
        rng.shuffle(nodes)
        if order and rng.random() < 0.5:
            nodes.remove(order[-1])
            nodes.insert(0, order[-1])
        order += nodes
    return order[:kills]


async def landing(kube: KubeClient, victim: str, previous: str | None) -> str:
    """Where a kill of ``victim`` lands now: in the domain's startup (whose) or once it settled."""
    if await converged(kube, NODES):
        return "settled"
    if victim != previous:
        return "startup of a peer"
    pod = (await live_pods(kube))[victim]
    up = pod.status is not None and imex_status(pod.status.podIP or "") is not None
    return "own startup, IMEX up" if up else "own startup, before IMEX"


async def restarted(domain: Domain, node: str, pod_uid: str, old_pid: int, what: str) -> int:
    """Wait for the kubelet to start the killed container again (after its CrashLoopBackOff)."""

    def new_pid() -> int | None:
        pid = container_pid(domain, node, pod_uid)
        return pid if pid != old_pid else None

    pid: int = await eventually(
        f"seed {SEED}: {what}: {node}'s daemon restarted", new_pid, within=400, interval=0.2
    )
    return pid


async def assert_recovered(
    domain: Domain,
    kube: KubeClient,
    before: dict[str, Member],
    indices: dict[str, int],
    kills_on: collections.Counter[str],
) -> dict[str, Member]:
    """The domain converged as before the kills, with one nvidia-imex per daemon and no orphan."""
    members = await wait_converged(kube, NODES, f"seed {SEED}: domain converged after the kills")
    for node, member in members.items():
        assert (member.pod, member.ip) == (before[node].pod, before[node].ip), f"seed {SEED}: {node}"
        assert member.restarts == before[node].restarts + kills_on[node], f"seed {SEED}: {node} restarts"
    entries = await eventually(
        f"seed {SEED}: clique lists four Ready daemons", lambda: _all_ready_entries(domain, 4), within=60
    )
    assert {node: e["index"] for node, e in entries.items()} == indices, f"seed {SEED}: indices changed"
    assert {node: e["ipAddress"] for node, e in entries.items()} == {n: m.ip for n, m in members.items()}
    for node in NODES:
        assert hosts_of(domain, node) == expected_hosts(domain, entries), f"seed {SEED}: hosts file of {node}"
    await eventually(f"seed {SEED}: ComputeDomain Ready", lambda: _cd_status(domain) == "Ready", within=60)
    ours = [p for p in host_processes() if p.env.get("COMPUTE_DOMAIN_UUID") == domain.uid]
    for node, member in members.items():
        daemons = [p for p in ours if p.env.get("NODE_NAME") == node and p.is_daemon]
        imexes = [p for p in ours if p.env.get("NODE_NAME") == node and p.is_imex]
        assert len(daemons) == 1, f"seed {SEED}: {len(daemons)} daemon processes on {node}"
        assert [(p.pid, p.ppid) for p in imexes] == [(member.imex_pid, daemons[0].pid)], (
            f"seed {SEED}: nvidia-imex processes on {node}: {imexes}"
        )
    return members


async def test_sigkilled_daemons_recover(
    domain: Domain, kube: KubeClient, pytestconfig: pytest.Config
) -> None:
    """SIGKILLed daemon containers are restarted by their kubelets and the domain converges as before.

    Each kill takes a whole container (daemon and its nvidia-imex) at a seeded random moment: either
    once the domain has settled, or right after the previous victim's container was started again, while
    it (or its peers) are still starting up. Then the domain must converge again: the same pods, their
    restart counts up by the kills, the same clique indices and IPs, consistent hosts files, the
    ComputeDomain Ready, and on each node one daemon process whose child is its only nvidia-imex.
    """
    rng = random.Random(SEED)
    loop = asyncio.get_running_loop()
    before = await wait_converged(kube, NODES, "domain converged")
    entries = await eventually("four Ready entries", lambda: _all_ready_entries(domain, 4), within=60)
    indices = {node: e["index"] for node, e in entries.items()}
    pod_uids = {node: pod.metadata.uid or "" for node, pod in (await live_pods(kube)).items() if pod.metadata}
    kills_on: collections.Counter[str] = collections.Counter()
    landed: collections.Counter[str] = collections.Counter()
    recoveries: list[tuple[float, float]] = []  # converged this long after the last kill, its restart
    last_kill = last_restart = 0.0
    previous = None

    async def recover() -> None:
        await assert_recovered(domain, kube, before, indices, kills_on)
        recoveries.append((loop.time() - last_kill, loop.time() - last_restart))

    for number, node in enumerate(kill_order(rng, DAEMON_KILLS), start=1):
        if number == 1 or rng.random() < 0.5:
            if number > 1:
                await recover()
            await asyncio.sleep(rng.uniform(0, 3))
        else:
            await asyncio.sleep(rng.uniform(0, STARTUP_SECONDS))
        where = await landing(kube, node, previous)
        pid = container_pid(domain, node, pod_uids[node])
        assert pid is not None
        killed = kill_container(pid)
        last_kill, previous = loop.time(), node
        kills_on[node] += 1
        landed[where] += 1
        new_pid = await restarted(domain, node, pod_uids[node], pid, f"kill {number}")
        last_restart = loop.time()
        progress(
            pytestconfig,
            f"daemon kill seed {SEED}: {number}/{DAEMON_KILLS} {node} pid {pid} ({killed} processes), "
            f"{where}; restarted {last_restart - last_kill:.1f} s later (pid {new_pid})",
        )
    await recover()
    since_kill, since_restart = zip(*recoveries, strict=True)
    progress(
        pytestconfig,
        f"daemon kill seed {SEED}: {DAEMON_KILLS} kills landed {dict(sorted(landed.items()))}; converged "
        f"{len(recoveries)} times, {statistics.mean(since_kill):.1f} s mean / {max(since_kill):.1f} s max "
        f"after the last kill, {statistics.mean(since_restart):.1f} s / {max(since_restart):.1f} s after "
        "its restart",
    )


async def test_node_without_fabric_joins_without_imex(domain: Domain, kube: KubeClient) -> None:
    """An empty CLIQUE_ID: the pod announces "no fabric", runs no IMEX, passes its probe, and is listed."""
    created = await kube.create(compute_domain_model("nofabric", USER_NS, num_nodes=1))
    assert created.metadata is not None and created.metadata.uid
    uid = created.metadata.uid
    spec = daemon_pod_spec(
        uid=uid, cd_name="nofabric", clique="", imexd=f"imexd-nofabric-{SUFFIX}", fake_bin=domain.fake_bin
    )
    name = f"nofabric-{SUFFIX}"
    apply(domain.cluster, daemon_set(name, spec, uid, {"kubernetes.io/hostname": "node-0"}))
    ready = await eventually(
        "no-fabric pod Ready and labelled", lambda: _ready_pod(kube, name), within=120, interval=2
    )
    assert ready.metadata is not None and ready.metadata.labels is not None
    assert ready.metadata.labels[CLIQUE_LABEL_KEY] == ""
    assert ready.status is not None and ready.status.podIP
    nodes = await eventually("no-fabric node in status", lambda: _status_nodes(domain, "nofabric"), within=60)
    assert nodes == [
        {"name": "node-0", "ipAddress": ready.status.podIP, "cliqueID": "", "index": -1, "status": "Ready"}
    ]
    assert imex_status(ready.status.podIP) is None
    assert not (
        domain.cluster.node("node-0").host_dir / "srv" / f"imexd-nofabric-{SUFFIX}" / "imexd.cfg"
    ).exists()
    assert ready.metadata.name is not None
    events = [e.get("msg") for e in daemon_log(domain, "node-0", ready.metadata.name)]
    assert "No clique ID: non-fabric noop mode" in events and "IMEX daemon started" not in events
    domain.cluster.kubectl("delete", "daemonset", name, "-n", DRIVER_NS, "--timeout=60s")


async def _ready_pod(kube: KubeClient, app: str) -> Pod | None:
    """The pod once Ready and announced (its probe passes before the daemon has labelled it)."""
    async for pod in kube.list(Pod, namespace=DRIVER_NS, labels={"app": app}):
        if is_ready(pod) and pod.metadata and CLIQUE_LABEL_KEY in (pod.metadata.labels or {}):
            return pod
    return None


def _status_nodes(domain: Domain, cd_name: str) -> list[dict[str, Any]] | None:
    cd = get_json(domain.cluster, "computedomain", cd_name, "-n", USER_NS)
    nodes: list[dict[str, Any]] = cd.get("status", {}).get("nodes", [])
    return nodes if nodes and all(n.get("status") == "Ready" for n in nodes) else None
