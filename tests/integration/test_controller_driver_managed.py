"""The controller in driver-managed mode on the real control plane, with daemon pods on real kubelets.

What is real: the apiserver, the DaemonSet and ResourceClaim controllers of kube-controller-manager,
the scheduler allocating each daemon pod's claim, and the kubelets of node-0 and node-1 preparing it and
running the pod on fakecri, whose exec probes (``compute-domain-daemon check``) succeed, so pods become
Ready through the real probe path. What stands in, and acts only as the real component would:
``DaemonDevicePlugin`` for the kubelet plugin's daemon device (slice + NodePrepareResources), the test
labelling nodes ``resource.nvidia.com/computeDomain=<uid>`` for the kubelet plugin, and the test setting
``resource.nvidia.com/computeDomain.cliqueID`` on each daemon pod for the daemon announcing itself.

Aspects covered: create → finalizer, both templates, the DaemonSet, Ready; daemons join one clique with
stable indices and the status follows readiness, and their domain's teardown happens in the documented
order as watches see it; a daemon replaced on its node keeps its index;
a non-fabric daemon appears with index -1; a name clash is reported as a Warning Event; objects of
vanished domains are swept, a look-alike outside their place is not; a deleted template is recreated;
delete → everything removed, node labels included, and the domain disappears; a tenant's look-alike
template with a finalizer of its own neither holds nor stands in for the domain's (docs/tenancy.md).
"""

from __future__ import annotations

import asyncio
import secrets
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from imexdra.api.computedomain import ComputeDomain
from imexdra.common.kube.api import PatchType
from imexdra.common.kube.kubeclient import KubeClient
from imexdra.common.kube.models.core_v1 import Node, Pod
from imexdra_sim.builders import compute_domain_model, daemon_slice
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.integration.controller_harness import (
    ControllerUnderTest,
    TeardownWatch,
    controller_running,
    events_of,
    foreign_template,
    label_as_daemon,
    leftovers,
)
from tests.integration.controller_standins import DaemonDevicePlugin, publish_daemon_devices
from tests.support.kubectl import apply, get_json
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

SUFFIX = secrets.token_hex(3)
DRIVER_NS = f"imexdra-drv-{SUFFIX}"
USER_NS = f"cd-drv-{SUFFIX}"
NODES = ("node-0", "node-1")
CLIQUE = "5e1f3a9c-7d2b-4c8e-9f01-23456789abcd.7"
FINALIZER = "resource.nvidia.com/computeDomain"
LABEL = "resource.nvidia.com/computeDomain"


@pytest.fixture(scope="module")
async def daemon_devices(cluster: LocalCluster, kube: KubeClient) -> AsyncIterator[list[DaemonDevicePlugin]]:
    """The daemon DeviceClass, and daemon-0 published and preparable on both real nodes."""
    plugins = [
        DaemonDevicePlugin(node=n.name, registry_dir=n.registry_dir, plugins_dir=n.plugins_dir)
        for n in map(cluster.node, NODES)
    ]
    for plugin in plugins:
        await plugin.start()
    await asyncio.wait_for(asyncio.gather(*(p.registered.wait() for p in plugins)), timeout=30)
    uids = {n: cluster.kubectl("get", "node", n, "-o", "jsonpath={.metadata.uid}").stdout for n in NODES}
    publish_daemon_devices(cluster, NODES, uids)
    yield plugins
    cluster.kubectl("delete", "resourceslices", *(daemon_slice(n)["metadata"]["name"] for n in NODES))
    for plugin in plugins:
        await plugin.stop()


@pytest.fixture(scope="module")
async def controller(
    cluster: LocalCluster, compute_domain_crds: None, daemon_devices: list[DaemonDevicePlugin]
) -> AsyncIterator[ControllerUnderTest]:
    """A driver-managed controller; at the end every domain of this module is deleted through it."""
    async with controller_running(cluster, DRIVER_NS, USER_NS, f"controller-drv-{SUFFIX}") as process:
        yield process


async def create_domain(kube: KubeClient, name: str, num_nodes: int = 0) -> str:
    created = await kube.create(compute_domain_model(name, USER_NS, num_nodes=num_nodes))
    assert created.metadata is not None and created.metadata.uid
    return created.metadata.uid


async def get_domain(kube: KubeClient, name: str) -> ComputeDomain:
    return await kube.get(ComputeDomain, name, namespace=USER_NS)


async def status_of(kube: KubeClient, name: str) -> str | None:
    cd = await get_domain(kube, name)
    return cd.status.status.value if cd.status else None


async def has_status(kube: KubeClient, name: str, expected: str) -> bool:
    return await status_of(kube, name) == expected


async def label_nodes(kube: KubeClient, uid: str | None, nodes: tuple[str, ...] = NODES) -> None:
    """What the kubelet plugin does when it prepares a workload's channel claim (None removes it)."""
    for node in nodes:
        await kube.patch(Node, node, {"metadata": {"labels": {LABEL: uid}}}, patch_type=PatchType.MERGE)


async def ready_daemon_pods(kube: KubeClient, uid: str, count: int) -> list[Pod]:
    async def pods() -> list[Pod] | None:
        found = [
            p
            async for p in kube.list(Pod, namespace=DRIVER_NS, labels={LABEL: uid})
            if p.metadata and p.metadata.deletionTimestamp is None
        ]
        ready = [
            p
            for p in found
            if p.status and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or ())
        ]
        return ready if len(ready) == count and len(found) == count else None

    result: list[Pod] = await eventually(f"{count} ready daemon pod(s)", pods, within=120, interval=1.0)
    return result


def clique(cluster: LocalCluster, uid: str, clique_id: str = CLIQUE) -> dict[str, Any] | None:
    items = get_json(cluster, "computedomaincliques", "-n", DRIVER_NS)["items"]
    found = [c for c in items if c["metadata"]["name"] == f"{uid}.{clique_id}"]
    return found[0] if found else None


async def delete_and_wait_gone(cluster: LocalCluster, kube: KubeClient, name: str, uid: str) -> None:
    await kube.delete(ComputeDomain, name, namespace=USER_NS)

    def gone() -> bool:
        names = [i["metadata"]["name"] for i in get_json(cluster, "computedomains", "-n", USER_NS)["items"]]
        return name not in names

    await eventually(f"{name} gone", gone, within=90, interval=1.0)
    assert leftovers(cluster, uid) == {
        "resourceclaimtemplates": [],
        "daemonsets": [],
        "computedomaincliques": [],
        "nodes": [],
    }


async def test_create_makes_finalizer_templates_daemonset_and_ready(
    cluster: LocalCluster, kube: KubeClient, controller: ControllerUnderTest
) -> None:
    """A numNodes-0 domain gets its finalizer, both templates, its DaemonSet, and is Ready at once."""
    uid = await create_domain(kube, "solo")
    await eventually("solo Ready", lambda: has_status(kube, "solo", "Ready"), within=30)
    cd = await get_domain(kube, "solo")
    assert cd.metadata is not None and cd.metadata.finalizers == [FINALIZER]
    assert leftovers(cluster, uid) == {
        "resourceclaimtemplates": ["solo-channel", f"computedomain-daemon-{uid}"],
        "daemonsets": [f"computedomain-daemon-{uid}"],
        "computedomaincliques": [],
        "nodes": [],
    }
    rcts = {
        i["metadata"]["name"]: i
        for i in get_json(cluster, "resourceclaimtemplates", "-A", "-l", f"{LABEL}={uid}")["items"]
    }
    assert rcts["solo-channel"]["metadata"]["namespace"] == USER_NS
    assert rcts[f"computedomain-daemon-{uid}"]["metadata"]["namespace"] == DRIVER_NS
    # Level-triggered: a template someone deletes is let go and created again.
    cluster.kubectl("delete", "resourceclaimtemplate", "solo-channel", "-n", USER_NS, "--wait=false")

    def recreated() -> bool:
        item = get_json(cluster, "resourceclaimtemplates", "-n", USER_NS)["items"]
        fresh = [
            i
            for i in item
            if i["metadata"]["name"] == "solo-channel" and "deletionTimestamp" not in i["metadata"]
        ]
        return bool(fresh) and fresh[0]["metadata"]["uid"] != rcts["solo-channel"]["metadata"]["uid"]

    await eventually("workload template recreated", recreated, within=30)
    await delete_and_wait_gone(cluster, kube, "solo", uid)


async def test_daemon_network_policy_is_made_again_and_goes_with_its_daemonset(
    cluster: LocalCluster, kube: KubeClient, controller: ControllerUnderTest
) -> None:
    """The daemons' NetworkPolicy: owned by the DaemonSet, made again when deleted, collected with it."""
    uid = await create_domain(kube, "fenced")
    name = f"computedomain-daemon-{uid}"

    def policy() -> dict[str, Any] | None:
        items = get_json(cluster, "networkpolicies", "-n", DRIVER_NS, "-l", f"{LABEL}={uid}")["items"]
        live = [i for i in items if "deletionTimestamp" not in i["metadata"]]
        return live[0] if live else None

    first = await eventually("the daemons' NetworkPolicy", policy, within=30)
    daemon_set = get_json(cluster, "daemonset", name, "-n", DRIVER_NS)
    [owner] = first["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("DaemonSet", name, daemon_set["metadata"]["uid"])
    assert first["metadata"]["name"] == name
    assert first["spec"]["podSelector"] == {"matchLabels": {LABEL: uid}}
    cluster.kubectl("delete", "networkpolicy", name, "-n", DRIVER_NS)
    again = await eventually(
        "the policy made again",
        lambda: (p := policy()) and p["metadata"]["uid"] != first["metadata"]["uid"] and p,
        within=30,
    )
    assert again["spec"] == first["spec"]
    await delete_and_wait_gone(cluster, kube, "fenced", uid)
    await eventually("the policy collected with its DaemonSet", lambda: policy() is None, within=30)


async def test_daemons_join_one_clique_with_stable_indices(
    cluster: LocalCluster, kube: KubeClient, controller: ControllerUnderTest
) -> None:
    """Two daemons get indices 0 and 1 and Ready; a replaced one gets its index back; delete cleans up."""
    uid = await create_domain(kube, "pair", num_nodes=2)
    await eventually("pair NotReady", lambda: has_status(kube, "pair", "NotReady"), within=30)
    await label_nodes(kube, uid)
    pods = await ready_daemon_pods(kube, uid, 2)
    by_node = {p.spec.nodeName: p for p in pods if p.spec}
    assert await status_of(kube, "pair") == "NotReady"  # not announced yet: not members
    for pod in pods:
        assert pod.metadata is not None and pod.metadata.name
        await label_as_daemon(kube, pod.metadata.name, DRIVER_NS, CLIQUE)

    def published() -> dict[str, tuple[int, str, str]] | None:
        found = clique(cluster, uid)
        if not found or len(found.get("daemons", [])) != 2:
            return None
        return {d["nodeName"]: (d["index"], d["ipAddress"], d["status"]) for d in found["daemons"]}

    daemons = await eventually("clique with both daemons", published, within=30)
    ips = {n: p.status.podIP for n, p in by_node.items() if p.status}
    index = {node: i for node, (i, _, _) in daemons.items()}  # first to announce gets 0
    assert sorted(index.values()) == [0, 1]
    assert daemons == {n: (index[n], ips[n], "Ready") for n in NODES}
    obj = clique(cluster, uid)
    assert obj is not None
    assert obj["metadata"]["labels"] == {LABEL: uid, "resource.nvidia.com/computeDomain.cliqueID": CLIQUE}
    assert [o["kind"] for o in obj["metadata"]["ownerReferences"]] == ["DaemonSet"]
    await eventually("pair Ready", lambda: has_status(kube, "pair", "Ready"), within=30)
    cd = await get_domain(kube, "pair")
    assert cd.status is not None
    assert sorted((n.name, n.index, n.clique_id, n.status.value) for n in cd.status.nodes) == [
        (node, index[node], CLIQUE, "Ready") for node in NODES
    ]
    await eventually(
        "Ready event",
        lambda: [e for e in events_of(cluster, USER_NS, uid) if e["reason"] == "Ready"],
        within=30,
    )

    # Replace node-0's daemon: it leaves the clique, node-1 keeps index 1, the new pod gets 0 back.
    old = by_node["node-0"]
    assert old.metadata is not None and old.metadata.name
    await kube.delete(Pod, old.metadata.name, namespace=DRIVER_NS)
    await eventually(
        "node-0 left", lambda: published() is None and clique(cluster, uid) is not None, within=60
    )
    remaining = clique(cluster, uid)
    assert remaining is not None
    assert [(d["nodeName"], d["index"]) for d in remaining["daemons"]] == [("node-1", index["node-1"])]
    new_pods = await ready_daemon_pods(kube, uid, 2)
    fresh = next(p for p in new_pods if p.spec and p.spec.nodeName == "node-0")
    assert fresh.metadata is not None and fresh.metadata.name and fresh.metadata.name != old.metadata.name
    await label_as_daemon(kube, fresh.metadata.name, DRIVER_NS, CLIQUE)
    daemons = await eventually("node-0 rejoined", published, within=30)
    assert {n: i for n, (i, _, _) in daemons.items()} == index  # the freed index is the lowest free one
    await eventually("pair Ready again", lambda: has_status(kube, "pair", "Ready"), within=30)
    async with TeardownWatch(kube, uid, user_namespace=USER_NS, driver_namespace=DRIVER_NS) as teardown:
        await delete_and_wait_gone(cluster, kube, "pair", uid)
        await eventually("the domain's DELETED event", lambda: teardown.when("ComputeDomain pair"))
    assert_teardown_order(teardown)


def assert_teardown_order(teardown: TeardownWatch) -> None:
    """The deletion order of docs (controller/deletion.py), as the watches saw it in etcd order.

    Node labels go before the workload template; the workload template before the daemon template and
    the DaemonSet; the DaemonSet before the cliques; everything before the domain itself.
    """
    [domain_gone] = teardown.when("ComputeDomain pair")
    [workload_gone] = teardown.when("Workload ResourceClaimTemplate pair-channel")
    [daemon_template_gone] = teardown.when("Daemon ResourceClaimTemplate")
    unlabelled = teardown.when("node", "unlabelled")
    [daemon_set_gone] = teardown.when("DaemonSet computedomain-daemon-")
    cliques_gone = teardown.when("ComputeDomainClique")
    assert len(unlabelled) == len(NODES) and len(cliques_gone) == 1, teardown.steps
    assert max(unlabelled) < workload_gone < min(daemon_template_gone, daemon_set_gone), teardown.steps
    assert daemon_set_gone < cliques_gone[0] < domain_gone, teardown.steps
    assert max(rv for rv, _ in teardown.steps) == domain_gone


async def test_non_fabric_daemon_is_reported_with_index_minus_one(
    cluster: LocalCluster, kube: KubeClient, controller: ControllerUnderTest
) -> None:
    """An empty clique ID makes a status node with cliqueID "" and index -1, and no clique object."""
    uid = await create_domain(kube, "plain", num_nodes=1)
    await label_nodes(kube, uid, ("node-1",))
    (pod,) = await ready_daemon_pods(kube, uid, 1)
    assert pod.metadata is not None and pod.metadata.name and pod.status is not None
    await label_as_daemon(kube, pod.metadata.name, DRIVER_NS, "")
    await eventually("plain Ready", lambda: has_status(kube, "plain", "Ready"), within=30)
    cd = await get_domain(kube, "plain")
    assert cd.status is not None
    assert [(n.name, n.ip_address, n.clique_id, n.index) for n in cd.status.nodes] == [
        ("node-1", pod.status.podIP, "", -1)
    ]
    assert leftovers(cluster, uid)["computedomaincliques"] == []
    await delete_and_wait_gone(cluster, kube, "plain", uid)


async def test_claim_template_name_clash_is_reported_then_resolved(
    cluster: LocalCluster, kube: KubeClient, controller: ControllerUnderTest
) -> None:
    """A foreign template of the requested name gives a Warning Event; once it is gone, ours is created."""
    apply(cluster, foreign_template("clash-channel", USER_NS))
    uid = await create_domain(kube, "clash")
    warning = await eventually(
        "conflict event",
        lambda: [e for e in events_of(cluster, USER_NS, uid) if e["reason"] == "ClaimTemplateConflict"],
        within=30,
    )
    assert warning[0]["type"] == "Warning" and "clash-channel" in warning[0]["message"]
    cluster.kubectl("delete", "resourceclaimtemplate", "clash-channel", "-n", USER_NS)

    def owned_template() -> bool:
        items = get_json(cluster, "resourceclaimtemplates", "-n", USER_NS, "-l", f"{LABEL}={uid}")["items"]
        return [i["metadata"]["name"] for i in items] == ["clash-channel"]

    await eventually("domain's own template", owned_template, within=40)
    await delete_and_wait_gone(cluster, kube, "clash", uid)


def labelled_template(
    name: str, namespace: str, uid: str, target: str, finalizer: str = FINALIZER
) -> dict[str, Any]:
    """A claim template carrying a domain's label and target, as the controller's or a tenant's look-alike."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {LABEL: uid, "resource.nvidia.com/computeDomainTarget": target},
            "finalizers": [finalizer],
        },
        "spec": {"spec": {"devices": {"requests": [{"name": "x", "exactly": {"deviceClassName": "none"}}]}}},
    }


async def test_a_lookalike_in_another_namespace_is_ignored(
    cluster: LocalCluster, kube: KubeClient, controller: ControllerUnderTest
) -> None:
    """A tenant's template labelled with the domain's UID and holding a finalizer of its own.

    It is reported once in the tenant's namespace (naming nothing of the domain's), never written while
    the domain lives; the domain's own template is recreated when deleted, and the domain is deleted in
    seconds. Once the domain is gone the stale sweep may delete the look-alike (its home is unknown
    then, controller/placement.py), but never takes the tenant's finalizer: CI once saw the sweep run
    within a second of the domain's end, so the untouched check is made while the domain exists.
    """
    uid = await create_domain(kube, "victim")
    await eventually("victim Ready", lambda: has_status(kube, "victim", "Ready"), within=30)
    tenant = f"{USER_NS}-tenant"
    cluster.create_namespace(tenant)
    hold = "tenant.example.com/hold"
    apply(cluster, labelled_template("lookalike", tenant, uid, "Workload", finalizer=hold))
    lookalike_uid = get_json(cluster, "resourceclaimtemplate", "lookalike", "-n", tenant)["metadata"]["uid"]
    [event] = await eventually(
        "LabelIgnored event",
        lambda: [e for e in events_of(cluster, tenant, lookalike_uid) if e["reason"] == "LabelIgnored"],
        within=30,
    )
    assert event["type"] == "Warning"
    assert USER_NS not in event["message"] and "victim" not in event["message"]

    first = get_json(cluster, "resourceclaimtemplate", "victim-channel", "-n", USER_NS)["metadata"]["uid"]
    cluster.kubectl("delete", "resourceclaimtemplate", "victim-channel", "-n", USER_NS, "--wait=false")

    def recreated() -> bool:
        items = get_json(cluster, "resourceclaimtemplates", "-n", USER_NS, "-l", f"{LABEL}={uid}")["items"]
        return [i["metadata"]["uid"] for i in items if i["metadata"]["name"] == "victim-channel"] not in (
            [],
            [first],
        )

    await eventually("the domain's own template recreated", recreated, within=30)
    lookalike = get_json(cluster, "resourceclaimtemplate", "lookalike", "-n", tenant)["metadata"]
    assert "deletionTimestamp" not in lookalike and lookalike["finalizers"] == [hold]
    await kube.delete(ComputeDomain, "victim", namespace=USER_NS)
    await eventually("victim gone", lambda: not has_domain(cluster, "victim"), within=30, interval=0.5)
    lookalike = get_json(cluster, "resourceclaimtemplate", "lookalike", "-n", tenant)["metadata"]
    assert lookalike["finalizers"] == [hold]  # the tenant's finalizer is the tenant's to remove
    assert [e["reason"] for e in events_of(cluster, tenant, lookalike_uid)] == ["LabelIgnored"]
    cluster.kubectl(
        "patch",
        "resourceclaimtemplate",
        "lookalike",
        "-n",
        tenant,
        "--type=merge",
        "-p",
        '{"metadata":{"finalizers":null}}',
    )
    cluster.kubectl("delete", "namespace", tenant, "--wait=false")


def has_domain(cluster: LocalCluster, name: str) -> bool:
    """Whether the domain ``name`` of the user namespace still exists."""
    return name in [
        i["metadata"]["name"] for i in get_json(cluster, "computedomains", "-n", USER_NS)["items"]
    ]


async def test_objects_of_vanished_domains_are_swept(
    cluster: LocalCluster, kube: KubeClient, controller: ControllerUnderTest
) -> None:
    """A finalized template, a clique and a node label naming an unknown domain are removed.

    A daemon template outside the daemon objects' place (a tenant's look-alike) is left alone.
    """
    ghost = str(uuid.uuid4())
    apply(
        cluster,
        labelled_template("ghost-channel", USER_NS, ghost, "Workload"),
        labelled_template("ghost-daemon", USER_NS, ghost, "Daemon"),
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomainClique",
            "metadata": {"name": f"{ghost}.{CLIQUE}", "namespace": DRIVER_NS, "labels": {LABEL: ghost}},
        },
    )
    await label_nodes(kube, ghost, ("node-0",))

    def swept() -> bool:
        return leftovers(cluster, ghost) == {
            "resourceclaimtemplates": ["ghost-daemon"],
            "daemonsets": [],
            "computedomaincliques": [],
            "nodes": [],
        }

    await eventually("stale objects swept", swept, within=60, interval=1.0)
    lookalike = get_json(cluster, "resourceclaimtemplate", "ghost-daemon", "-n", USER_NS)["metadata"]
    assert "deletionTimestamp" not in lookalike and lookalike["finalizers"] == [FINALIZER]
    cluster.kubectl(
        "patch",
        "resourceclaimtemplate",
        "ghost-daemon",
        "-n",
        USER_NS,
        "--type=merge",
        "-p",
        '{"metadata":{"finalizers":null}}',
    )
    cluster.kubectl("delete", "resourceclaimtemplate", "ghost-daemon", "-n", USER_NS)
