"""Least privilege on the real API server: the chart's RBAC and admission policies as installed.

The chart's identities are installed for release ``chartrbac`` (leader election, the GPU clique label
and one additional namespace on, so every conditional grant is present). Then, per component:
``kubectl auth can-i --as=<ServiceAccount>`` allows each permission of rbac-uses.yaml and denies each
of its ``denied`` list; tokens from ``imexdra_sim.localcluster.credentials`` authenticate as the chart's
accounts; and the components' own write paths (the plugin's node label, the daemon's pod label) pass
the own-node/own-pod admission policies (a daemon: its pod's clique label and IMEX-peers annotation)
while the same writes to another node or pod are refused.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import msgspec
import pytest

from imexdra.api.constants import CLIQUE_LABEL_KEY, NODE_LABEL_KEY
from imexdra.api.imexpeers import IMEX_PEERS_ANNOTATION, ImexPeers, PeerLink, decode_annotation
from imexdra.common.errors import DriverError
from imexdra.common.kube.api import PatchType
from imexdra.common.kube.client import ApiStatusError
from imexdra.common.kube.connection import connect, make_client
from imexdra.common.kube.kubeclient import KubeClient
from imexdra.common.kube.models.core_v1 import Node, Pod
from imexdra.common.kube.transport import Transport, resource_path
from imexdra.daemon.health import pod_annotator
from imexdra.daemon.podlabel import label_own_pod
from imexdra.kubeletplugin.nodelabels import NodeLabeler
from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.localcluster.credentials import kubectl_as, whoami
from tests.support.kubectl import apply, get_json
from tests.support.waiting import eventually
from tests.unit.chart import rbac
from tests.unit.chart.install import ChartRBAC, install_chart_rbac

RELEASE = "chartrbac"
NAMESPACE = "chart-rbac"
OLD_NAMESPACE = "chart-rbac-old"
VALUES = {
    "controller": {
        "replicas": 2,
        "leaderElection": {"enabled": True},
        "containers": {"computeDomain": {"env": [{"name": "ADDITIONAL_NAMESPACES", "value": OLD_NAMESPACE}]}},
    },
    "kubeletPlugin": {"containers": {"computeDomains": {"gpuCliqueLabelEnabled": True}}},
}
CONDITIONS = frozenset({"driverManaged", "cliques", "leaderElection", "gpuCliqueLabel", "claims"})


@pytest.fixture(scope="module")
def chart_rbac(cluster: LocalCluster, compute_domain_crds: None) -> Iterator[ChartRBAC]:
    """The chart's identities installed for this module; removed afterwards."""
    installed = install_chart_rbac(cluster, release=RELEASE, namespace=NAMESPACE, values=VALUES)
    yield installed
    installed.uninstall()
    for namespace in (NAMESPACE, OLD_NAMESPACE):
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def the_install(installed: ChartRBAC) -> rbac.Install:
    """The rbac-uses.yaml view of this install."""
    return rbac.Install(
        driver_namespace=NAMESPACE,
        managed_namespaces=(NAMESPACE, OLD_NAMESPACE),
        base=installed.service_account("controller").removesuffix("-controller"),
        lease=f"{RELEASE}-imexdra-controller",
        conditions=CONDITIONS,
    )


def can_i(cluster: LocalCluster, account: str, permission: rbac.Permission) -> bool:
    """``kubectl auth can-i`` for ServiceAccount ``account`` (``namespace:name``)."""
    group = f".{permission.group}" if permission.group else ""
    resource, _, subresource = permission.resource.partition("/")
    target = f"{resource}{group}" + (f"/{permission.resource_name}" if permission.resource_name else "")
    if permission.namespace is not None:
        scope = ["-n", permission.namespace]
    elif permission.resource in rbac.CLUSTER_SCOPED:
        scope = []
    else:
        scope = ["--all-namespaces"]
    args = ["auth", "can-i", permission.verb, target, *scope, f"--as=system:serviceaccount:{account}"]
    if subresource:
        args.append(f"--subresource={subresource}")
    result = cluster.kubectl(*args, check=False)
    answer = result.stdout.strip()
    assert answer in ("yes", "no"), f"kubectl auth can-i {args}: {result.stdout} {result.stderr}"
    return answer == "yes"


def answers(
    cluster: LocalCluster, installed: ChartRBAC, component: str, permissions: set[rbac.Permission]
) -> dict[str, bool]:
    """can-i for each permission (a few kubectl processes at a time)."""
    account = installed.service_account(component)
    namespace = NAMESPACE if component != "daemon" else None

    def ask(permission: rbac.Permission) -> tuple[str, bool]:
        home = namespace or permission.namespace or NAMESPACE
        return str(permission), can_i(cluster, f"{home}:{account}", permission)

    with ThreadPoolExecutor(max_workers=3) as pool:
        return dict(pool.map(ask, sorted(permissions, key=str)))


@pytest.mark.parametrize("component", rbac.COMPONENTS)
def test_every_used_permission_is_allowed(
    cluster: LocalCluster, chart_rbac: ChartRBAC, component: str
) -> None:
    """The API server allows the component's account every (verb, resource) its code uses."""
    expected = rbac.expected(component, the_install(chart_rbac))
    assert expected
    refused = [
        name for name, allowed in answers(cluster, chart_rbac, component, expected).items() if not allowed
    ]
    assert refused == []


@pytest.mark.parametrize("component", rbac.COMPONENTS)
def test_unneeded_permissions_are_denied(
    cluster: LocalCluster, chart_rbac: ChartRBAC, component: str
) -> None:
    """The API server denies the component's account secrets, exec and writes its code never makes."""
    denied = rbac.denied(component, the_install(chart_rbac))
    assert denied
    allowed = [name for name, ok in answers(cluster, chart_rbac, component, denied).items() if ok]
    assert allowed == []


def test_policies_type_check_cleanly(cluster: LocalCluster, chart_rbac: ChartRBAC) -> None:
    """The API server type-checks every CEL expression of the chart's admission policies without warnings."""
    for policy in (o for o in chart_rbac.objects if o["kind"] == "ValidatingAdmissionPolicy"):
        status = json.loads(
            cluster.kubectl(
                "get", "validatingadmissionpolicy", policy["metadata"]["name"], "-o", "json"
            ).stdout
        )["status"]
        assert status.get("typeChecking", {}).get("expressionWarnings", []) == [], policy["metadata"]["name"]


def test_credentials_authenticate_as_the_chart_account(cluster: LocalCluster, chart_rbac: ChartRBAC) -> None:
    """A helper kubeconfig is the account; a node-bound one also names the node; RBAC applies to it."""
    account = chart_rbac.service_account("kubeletPlugin")
    plain = whoami(cluster, chart_rbac.kubeconfig("kubeletPlugin"))
    assert plain.username == f"system:serviceaccount:{NAMESPACE}:{account}"
    assert plain.node_name is None
    bound = whoami(cluster, chart_rbac.kubeconfig("kubeletPlugin", node="node-0"))
    assert bound.username == plain.username
    assert bound.node_name == "node-0"
    as_plugin = chart_rbac.kubeconfig("kubeletPlugin")
    listed = kubectl_as(cluster, as_plugin, "get", "computedomains", "-A")
    assert listed.returncode == 0, listed.stderr
    secrets = kubectl_as(cluster, as_plugin, "get", "secrets", "-n", NAMESPACE)
    assert secrets.returncode != 0 and "forbidden" in secrets.stderr


def slice_manifest(node: str) -> dict[str, Any]:
    """A ResourceSlice of a driver nobody schedules for, on ``node``."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"chart-rbac-{node}"},
        "spec": {
            "driver": "chart-rbac.imexdra.dev",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "probe"}],
        },
    }


def test_plugin_writes_only_its_own_nodes_slices(cluster: LocalCluster, chart_rbac: ChartRBAC) -> None:
    """Bound to node-0 the plugin writes node-0's slice; node-1's, or without a bound token, is refused."""
    own = chart_rbac.kubeconfig("kubeletPlugin", node="node-0")
    unbound = chart_rbac.kubeconfig("kubeletPlugin")
    try:
        created = kubectl_as(cluster, own, "create", "-f", "-", input=json.dumps(slice_manifest("node-0")))
        assert created.returncode == 0, created.stderr
        deleted = kubectl_as(cluster, own, "delete", "resourceslice", "chart-rbac-node-0")
        assert deleted.returncode == 0, deleted.stderr
        other = kubectl_as(cluster, own, "create", "-f", "-", input=json.dumps(slice_manifest("node-1")))
        assert other.returncode != 0
        assert "may write only ResourceSlices of its own node node-0" in other.stderr
        anonymous = kubectl_as(
            cluster, unbound, "create", "-f", "-", input=json.dumps(slice_manifest("node-0"))
        )
        assert anonymous.returncode != 0
        assert "pod-bound ServiceAccount token" in anonymous.stderr
    finally:
        for node in ("node-0", "node-1"):
            cluster.kubectl("delete", "resourceslice", f"chart-rbac-{node}", "--ignore-not-found")


@pytest.fixture(scope="module")
def default_rbac(cluster: LocalCluster, compute_domain_crds: None) -> Iterator[ChartRBAC]:
    """The chart's identities with default values (so only the default grants back the writes below)."""
    installed = install_chart_rbac(cluster, release=f"{RELEASE}def", namespace=f"{NAMESPACE}-def")
    yield installed
    installed.uninstall()
    cluster.kubectl("delete", "namespace", f"{NAMESPACE}-def", "--wait=false", check=False)


@pytest.fixture
async def plugin_client(default_rbac: ChartRBAC) -> AsyncIterator[KubeClient]:
    """An API client with the default install's kubelet-plugin account, its token bound to node-0."""
    client = connect(default_rbac.kubeconfig("kubeletPlugin", node="node-0")).kube(
        field_manager="chart-rbac-test"
    )
    yield client
    client.close()


@pytest.fixture
async def plugin_transport(default_rbac: ChartRBAC) -> AsyncIterator[Transport]:
    """The plugin's lean transport with the same account and token as ``plugin_client``."""
    connection = connect(default_rbac.kubeconfig("kubeletPlugin", node="node-0"))
    transport = connection.transport(user_agent="imexdra-tests")
    yield transport
    transport.close()


def node_labels(cluster: LocalCluster, node: str) -> dict[str, str]:
    """A node's labels."""
    labels: dict[str, str] = json.loads(
        cluster.kubectl("get", "node", node, "-o", "jsonpath={.metadata.labels}").stdout
    )
    return labels


async def replace_refusal(
    client: KubeClient, name: str, change: Callable[[Node], None], *, dry_run: bool
) -> str:
    """Replace node ``name`` after ``change``; return the API server's refusal ("" when it succeeds).

    A 409 (the kubelet updated its Node between our GET and PUT; the apiserver checks the
    resourceVersion before validating admission) says nothing about the policy: read again and retry.
    """
    while True:
        node = await client.get(Node, name)
        change(node)
        try:
            await client.request(
                "PUT",
                resource_path(Node, name),
                query={"fieldManager": client.field_manager, **({"dryRun": "All"} if dry_run else {})},
                body=msgspec.json.encode(node),
            )
        except ApiStatusError as error:
            if error.code == 409:
                continue
            return str(error)
        return ""


def _label_probe(node: Node) -> None:
    assert node.metadata is not None
    node.metadata.labels = {**(node.metadata.labels or {}), NODE_LABEL_KEY: "probe"}


async def foreign_node_write_refused(client: KubeClient) -> bool:
    """Whether a (dry-run) label write to node-1 by the node-0 plugin is refused by the policy yet."""
    return "of its own node" in await replace_refusal(client, "node-1", _label_probe, dry_run=True)


async def test_plugin_labels_only_its_own_node(
    cluster: LocalCluster, default_rbac: ChartRBAC, plugin_client: KubeClient, plugin_transport: Transport
) -> None:
    """The plugin's NodeLabeler works on node-0 under the chart's RBAC; other labels and nodes are refused."""
    domain = "00000000-chart-rbac-test"
    # The apiserver loads a new ValidatingAdmissionPolicy asynchronously: wait until it is enforced
    # (a freshly installed chart has the same short window on a real cluster).
    await eventually(
        "the chart's node policy is enforced", lambda: foreign_node_write_refused(plugin_client), within=30
    )
    own = NodeLabeler(plugin_transport, "node-0")
    try:
        await own.add(domain)
        assert node_labels(cluster, "node-0")[NODE_LABEL_KEY] == domain
        await own.remove(domain)
        assert NODE_LABEL_KEY not in node_labels(cluster, "node-0")
        with pytest.raises(DriverError, match="of its own node node-0"):
            await NodeLabeler(plugin_transport, "node-1").add(domain)
        assert NODE_LABEL_KEY not in node_labels(cluster, "node-1")

        def control_plane_label(node: Node) -> None:
            assert node.metadata is not None and node.metadata.labels is not None
            node.metadata.labels["node-role.kubernetes.io/control-plane"] = ""

        refusal = await replace_refusal(plugin_client, "node-0", control_plane_label, dry_run=False)
        assert "may change only the labels" in refusal
        assert "node-role.kubernetes.io/control-plane" not in node_labels(cluster, "node-0")
    finally:
        for node in ("node-0", "node-1"):
            cluster.kubectl("label", "node", node, f"{NODE_LABEL_KEY}-", check=False)


def daemon_pod(name: str, node: str) -> dict[str, Any]:
    """A pod running as the daemon account (fakecri fakes its container)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": "chart-rbac"}},
        "spec": {
            "serviceAccountName": "compute-domain-daemon-service-account",
            "nodeName": node,
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
        },
    }


async def test_daemon_patches_only_its_own_pods_clique_label_and_peers_annotation(
    cluster: LocalCluster, chart_rbac: ChartRBAC
) -> None:
    """label_own_pod and the IMEX-peers annotation succeed with the daemon's pod-bound token; another pod,
    another label or another annotation is refused."""
    apply(cluster, daemon_pod("daemon-a", "node-0"), daemon_pod("daemon-b", "node-1"))
    kubeconfig = chart_rbac.kubeconfig("daemon", pod="daemon-a")
    identity = whoami(cluster, kubeconfig)
    assert identity.extra["authentication.kubernetes.io/pod-name"] == ("daemon-a",)
    client = make_client(field_manager="chart-rbac-test", kubeconfig=kubeconfig)
    try:
        await label_own_pod(client, name="daemon-a", namespace=NAMESPACE, clique_id="uuid.7")

        escaped = CLIQUE_LABEL_KEY.replace(".", "\\.")

        def label(pod: str) -> str:
            path = "jsonpath={.metadata.labels." + escaped + "}"
            return cluster.kubectl("get", "pod", pod, "-n", NAMESPACE, "-o", path).stdout

        assert await eventually("clique label on daemon-a", lambda: label("daemon-a") == "uuid.7")
        with pytest.raises(DriverError, match="only its own pod"):
            await label_own_pod(client, name="daemon-b", namespace=NAMESPACE, clique_id="uuid.7")
        with pytest.raises(ApiStatusError, match="may change only the label"):
            stolen = {"metadata": {"labels": {"app": "stolen"}}}
            await client.patch(Pod, "daemon-a", stolen, namespace=NAMESPACE, patch_type=PatchType.MERGE)
        report = ImexPeers(connected=1, expected=2, not_connected=[PeerLink(node_name="node-1", state="R")])
        await pod_annotator(client, name="daemon-a", namespace=NAMESPACE)(report)
        pod = get_json(cluster, "pod", "daemon-a", "-n", NAMESPACE)
        assert decode_annotation(pod["metadata"]["annotations"][IMEX_PEERS_ANNOTATION]) == report
        with pytest.raises(DriverError, match="only its own pod"):
            await pod_annotator(client, name="daemon-b", namespace=NAMESPACE)(report)
        with pytest.raises(ApiStatusError, match=r"and the annotation resource\.nvidia\.com/imexPeers"):
            other = {"metadata": {"annotations": {"example.com/note": "x"}}}
            await client.patch(Pod, "daemon-a", other, namespace=NAMESPACE, patch_type=PatchType.MERGE)
    finally:
        client.close()
        cluster.kubectl(
            "delete",
            "pod",
            "daemon-a",
            "daemon-b",
            "-n",
            NAMESPACE,
            "--grace-period=0",
            "--force",
            check=False,
        )
