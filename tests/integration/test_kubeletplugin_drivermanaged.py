"""Driver-managed mode end to end on node-0's real kubelet: prepare, readiness wait, unprepare, SIGKILL.

The controller is not part of this test: the test stands in for it by creating the workload
ResourceClaimTemplate (as the controller renders it) and by writing the ComputeDomainClique
``<CD UID>.<clique ID>`` that marks node-0's IMEX daemon Ready — in this project's single-writer design
only the controller writes cliques, and the plugin only reads them.
"""

from __future__ import annotations

import signal
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from imexdra.kubeletplugin.checkpoint.model import ClaimState
from imexdra_sim.builders import channel_template
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.events import driver_prepare_failure
from tests.integration.pluginharness import (
    CLIQUE,
    DAEMON_CLASS,
    DRIVER_NAMESPACE,
    LABEL,
    PluginProcess,
    SimulatedNode,
    create_domain,
    install_api,
    mark_daemon_ready,
    node_labels,
    node_slices,
    plugin_kubeconfig,
    pod_claim_uid,
    pod_field,
    pod_gone,
)
from tests.support.builders import channel_pod
from tests.support.kubectl import apply
from tests.support.waiting import eventually

NODE = "node-0"


@pytest.fixture(scope="module")
def plugin(cluster: LocalCluster) -> Iterator[PluginProcess]:
    """A driver-managed plugin on node-0 (which has an NVLink clique)."""
    install_api(cluster)
    node = cluster.node(NODE)
    process = PluginProcess(SimulatedNode(node, CLIQUE), plugin_kubeconfig(cluster, node))
    process.start()
    yield process
    if process.process is not None:
        process.stop()


@pytest.fixture
def namespace(cluster: LocalCluster) -> Iterator[str]:
    """A fresh namespace per test."""
    name = f"kp-dm-{uuid.uuid4().hex[:6]}"
    cluster.create_namespace(name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false")


async def start_running_pod(cluster: LocalCluster, plugin: PluginProcess, namespace: str, pod: str) -> str:
    apply(cluster, channel_pod(pod, namespace, "train-channel", node=NODE))
    await eventually(
        "pod Running", lambda: pod_field(cluster, namespace, pod, "{.status.phase}") == "Running", within=90
    )
    return pod_claim_uid(cluster, namespace, pod)


async def test_channel_claim_waits_for_daemon_then_runs_and_cleans_up(
    cluster: LocalCluster, plugin: PluginProcess, namespace: str
) -> None:
    """Label, readiness wait, channel0 injected through CDI; deleting the pod undoes it all."""
    await plugin.wait_registered()
    await eventually("ResourceSlice", lambda: node_slices(cluster, NODE))
    domain_uid = create_domain(cluster, namespace)
    apply(cluster, channel_pod("worker", namespace, "train-channel", node=NODE))
    await eventually("node label", lambda: node_labels(cluster, NODE).get(LABEL) == domain_uid)
    claim_uid = await eventually("claim allocated", lambda: pod_claim_uid(cluster, namespace, "worker"))
    assert pod_field(cluster, namespace, "worker", "{.status.phase}") == "Pending"
    assert plugin.sim.checkpoint().claims[claim_uid].state == ClaimState.PREPARE_STARTED

    mark_daemon_ready(cluster, domain_uid, NODE)
    await eventually(
        "pod Running",
        lambda: pod_field(cluster, namespace, "worker", "{.status.phase}") == "Running",
        within=90,
    )
    pod_uid = pod_field(cluster, namespace, "worker", "{.metadata.uid}")
    creates = [r for r in plugin.sim.node.cri_records("CreateContainer") if r["pod_uid"] == pod_uid]
    assert [r["cdi_devices"] for r in creates] == [
        [f"k8s.compute-domain.nvidia.com/claim={claim_uid}-channel-0"]
    ]
    spec = yaml.safe_load(plugin.sim.claim_spec(claim_uid).read_text())
    [device] = spec["devices"]
    assert [n["path"] for n in device["containerEdits"]["deviceNodes"]] == [
        "/dev/nvidia-caps-imex-channels/channel0"
    ]
    assert plugin.sim.checkpoint().claims[claim_uid].state == ClaimState.PREPARE_COMPLETED

    cluster.kubectl("delete", "pod", "worker", "-n", namespace, "--wait=false")
    await eventually("pod deleted", lambda: pod_gone(cluster, namespace, "worker"), within=90)
    await eventually("CDI spec removed", lambda: not plugin.sim.claim_spec(claim_uid).exists())
    assert claim_uid not in plugin.sim.checkpoint().claims
    await eventually("node label removed", lambda: LABEL not in node_labels(cluster, NODE))


async def test_sigkill_between_prepare_and_unprepare(
    cluster: LocalCluster, plugin: PluginProcess, namespace: str
) -> None:
    """A plugin killed after prepare unprepares correctly once restarted; its slice is republished."""
    await plugin.wait_registered()
    domain_uid = create_domain(cluster, namespace)
    mark_daemon_ready(cluster, domain_uid, NODE)
    claim_uid = await start_running_pod(cluster, plugin, namespace, "worker")
    assert plugin.sim.claim_spec(claim_uid).exists()

    assert plugin.stop(signal.SIGKILL) == -signal.SIGKILL
    cluster.kubectl("delete", "pod", "worker", "-n", namespace, "--wait=false")
    await eventually(
        "pod terminating",
        lambda: pod_field(cluster, namespace, "worker", "{.metadata.deletionTimestamp}") != "",
    )
    assert plugin.sim.claim_spec(claim_uid).exists()  # nobody could unprepare it yet
    assert plugin.sim.checkpoint().claims[claim_uid].state == ClaimState.PREPARE_COMPLETED

    plugin.start()
    await eventually("pod deleted after restart", lambda: pod_gone(cluster, namespace, "worker"), within=120)
    await eventually("CDI spec removed", lambda: not plugin.sim.claim_spec(claim_uid).exists())
    assert claim_uid not in plugin.sim.checkpoint().claims
    await eventually("node label removed", lambda: LABEL not in node_labels(cluster, NODE))
    slices = await eventually("ResourceSlice after restart", lambda: node_slices(cluster, NODE))
    assert [d["name"] for d in slices[0]["spec"]["devices"]] == ["channel-0", "daemon-0"]


async def test_strict_decoding_error_reaches_the_pod_events(
    cluster: LocalCluster, plugin: PluginProcess, namespace: str
) -> None:
    """A config with an unknown field fails permanently; the kubelet shows it as a pod event."""
    await plugin.wait_registered()
    domain_uid = create_domain(cluster, namespace)
    template = channel_template(namespace, "broken-channel", domain_uid, "Single")
    template["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]["unexpectedField"] = 1
    apply(cluster, template, channel_pod("broken", namespace, "broken-channel", node=NODE))

    def event() -> str:
        found = driver_prepare_failure(cluster, namespace, "broken")
        return str(found["message"]) if found else ""

    message = await eventually("FailedPrepareDynamicResources event", event, within=90)
    assert "error preparing devices for claim" in message
    assert 'strict decoding error: unknown field "unexpectedField"' in message
    assert plugin.logged("Permanent error")


def daemon_template(domain_uid: str, *, namespace: str = DRIVER_NAMESPACE) -> dict[str, Any]:
    """The daemon ResourceClaimTemplate ``computedomain-daemon-<uid>`` as the controller renders it."""
    template = channel_template(namespace, f"computedomain-daemon-{domain_uid}", domain_uid, "Single")
    devices = template["spec"]["spec"]["devices"]
    devices["requests"] = [{"name": "daemon", "exactly": {"deviceClassName": DAEMON_CLASS}}]
    devices["config"][0]["requests"] = ["daemon"]
    devices["config"][0]["opaque"]["parameters"] = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomainDaemonConfig",
        "domainID": domain_uid,
    }
    return template


def daemon_pod(namespace: str, name: str, domain_uid: str) -> dict[str, Any]:
    """A pod on node-0 holding the domain's daemon claim (from ``daemon_template``)."""
    pod = channel_pod(name, namespace, f"computedomain-daemon-{domain_uid}", node=NODE)
    pod["spec"]["resourceClaims"][0]["name"] = "daemon"
    pod["spec"]["containers"][0]["resources"]["claims"][0]["name"] = "daemon"
    return pod


def daemon_set(name: str, labelled_for: str, domain_uid: str) -> dict[str, Any]:
    """A DaemonSet on node-0 whose pods hold ``domain_uid``'s daemon claim; labelled for ``labelled_for``."""
    pod = daemon_pod(DRIVER_NAMESPACE, name, domain_uid)
    selector = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": DRIVER_NAMESPACE, "labels": {LABEL: labelled_for}},
        "spec": {
            "selector": {"matchLabels": selector},
            "template": {"metadata": {"labels": selector}, "spec": pod["spec"]},
        },
    }


def daemon_set_pod(cluster: LocalCluster, daemon_set: str) -> str:
    """The name of the DaemonSet's pod, or "" before it exists."""
    return cluster.kubectl(
        "get",
        "pods",
        "-n",
        DRIVER_NAMESPACE,
        "-l",
        f"app={daemon_set}",
        "-o",
        "jsonpath={.items[*].metadata.name}",
    ).stdout


async def test_daemon_claim_gets_management_access_and_its_domain_dir(
    cluster: LocalCluster, plugin: PluginProcess, namespace: str
) -> None:
    """A pod of the domain's daemon DaemonSet gets device=all (with the driver's IMEX) and its CDI edits."""
    await plugin.wait_registered()
    domain_uid = create_domain(cluster, namespace)
    daemons = f"computedomain-daemon-{domain_uid}"
    apply(cluster, daemon_template(domain_uid), daemon_set(daemons, domain_uid, domain_uid))
    name = await eventually("daemon pod created", lambda: daemon_set_pod(cluster, daemons), within=60)
    await eventually(
        "daemon pod Running",
        lambda: pod_field(cluster, DRIVER_NAMESPACE, name, "{.status.phase}") == "Running",
        within=90,
    )
    claim_uid = pod_claim_uid(cluster, DRIVER_NAMESPACE, name)
    pod_uid = pod_field(cluster, DRIVER_NAMESPACE, name, "{.metadata.uid}")
    creates = [r for r in plugin.sim.node.cri_records("CreateContainer") if r["pod_uid"] == pod_uid]
    assert [r["cdi_devices"] for r in creates] == [
        [
            "k8s.compute-domain.nvidia.com/device=all",
            f"k8s.compute-domain.nvidia.com/claim={claim_uid}-daemon-0",
        ]
    ]
    [device] = yaml.safe_load(plugin.sim.claim_spec(claim_uid).read_text())["devices"]
    edits = device["containerEdits"]
    assert edits["env"][:2] == [f"CLIQUE_ID={CLIQUE}", f"COMPUTE_DOMAIN_UUID={domain_uid}"]
    domain_dir = plugin.sim.plugin_dir / "domains" / domain_uid
    assert (
        edits["mounts"][0]["hostPath"] == str(domain_dir) and edits["mounts"][0]["containerPath"] == "/imexd"
    )
    assert domain_dir.is_dir()
    # device=all brings the driver's IMEX programs from the driver root (here: the host's view of it).
    base = yaml.safe_load(
        (plugin.sim.cdi_root / "k8s.compute-domain.nvidia.com-device_base.yaml").read_text()
    )
    assert [(m["hostPath"], m["containerPath"], m["options"]) for m in base["containerEdits"]["mounts"]] == [
        (
            str(plugin.sim.driver_root / "usr/bin" / name),
            f"/usr/bin/{name}",
            ["ro", "nosuid", "nodev", "bind"],
        )
        for name in ("nvidia-imex", "nvidia-imex-ctl")
    ]
    assert LABEL not in node_labels(cluster, NODE)  # daemon claims never label the node

    cluster.kubectl("delete", "daemonset", daemons, "-n", DRIVER_NAMESPACE, "--wait=false")
    await eventually("daemon pod deleted", lambda: pod_gone(cluster, DRIVER_NAMESPACE, name), within=90)
    assert not plugin.sim.claim_spec(claim_uid).exists()
    assert domain_dir.is_dir()  # kept until the periodic cleanup finds its ComputeDomain gone


@pytest.mark.parametrize(
    ("holder", "refusal"),
    [
        ("tenant-pod", "it is not in the driver namespace imexdra-kp"),
        ("driver-namespace-pod", "is not controlled by a DaemonSet"),
        ("other-domains-daemonset", "which is not the IMEX daemon DaemonSet of ComputeDomain"),
    ],
)
async def test_daemon_claim_not_held_by_its_domains_daemons_is_refused(
    cluster: LocalCluster, plugin: PluginProcess, namespace: str, holder: str, refusal: str
) -> None:
    """A daemon claim held by anything but the domain's daemon pods: permanent pod event, nothing prepared."""
    await plugin.wait_registered()
    domain_uid = create_domain(cluster, namespace)
    pod_namespace = namespace if holder == "tenant-pod" else DRIVER_NAMESPACE
    name = f"{holder}-{namespace}"
    apply(cluster, daemon_template(domain_uid, namespace=pod_namespace))
    if holder == "other-domains-daemonset":
        apply(cluster, daemon_set(name, str(uuid.uuid4()), domain_uid))
        name = await eventually(
            "pod created", lambda: daemon_set_pod(cluster, f"{holder}-{namespace}"), within=60
        )
    else:
        apply(cluster, daemon_pod(pod_namespace, name, domain_uid))
    try:
        event = await eventually(
            "FailedPrepareDynamicResources event",
            lambda: driver_prepare_failure(cluster, pod_namespace, name),
            within=90,
        )
        assert refusal in event["message"]
        assert "ComputeDomain daemon device" in event["message"]
        assert pod_field(cluster, pod_namespace, name, "{.status.phase}") == "Pending"
        claim_uid = pod_claim_uid(cluster, pod_namespace, name)
        assert claim_uid not in plugin.sim.checkpoint().claims
        assert not plugin.sim.claim_spec(claim_uid).exists()
        assert not (plugin.sim.plugin_dir / "domains" / domain_uid).exists()
    finally:
        kind = "daemonset" if holder == "other-domains-daemonset" else "pod"
        cluster.kubectl("delete", kind, f"{holder}-{namespace}", "-n", pod_namespace, "--wait=false")


def claim_gone(cluster: LocalCluster, namespace: str, claim_uid: str) -> bool:
    """Whether no ResourceClaim of ``namespace`` has ``claim_uid`` any more."""
    uids = cluster.kubectl(
        "get", "resourceclaims", "-n", namespace, "-o", "jsonpath={.items[*].metadata.uid}"
    )
    return claim_uid not in uids.stdout.split()


async def test_a_stale_prepare_started_claim_is_unprepared_by_the_plugin_itself(
    cluster: LocalCluster, plugin: PluginProcess, namespace: str
) -> None:
    """Upstream's scenario: a claim left PrepareStarted, the plugin uninstalled, the claim deleted, the
    plugin back: at start it finds the claim gone and unprepares it (tombstone, node label), unasked."""
    await plugin.wait_registered()
    domain_uid = create_domain(cluster, namespace)  # its daemon never becomes ready: prepare waits
    apply(cluster, channel_pod("worker", namespace, "train-channel", node=NODE))
    claim_uid = await eventually("claim allocated", lambda: pod_claim_uid(cluster, namespace, "worker"))
    await eventually(
        "PrepareStarted",
        lambda: claim_uid in plugin.sim.checkpoint().claims and LABEL in node_labels(cluster, NODE),
    )
    assert plugin.sim.checkpoint().claims[claim_uid].state == ClaimState.PREPARE_STARTED
    assert node_labels(cluster, NODE)[LABEL] == domain_uid

    plugin.stop()  # "uninstall": no plugin answers the kubelet from here on
    cluster.kubectl("delete", "pod", "worker", "-n", namespace, "--grace-period=0", "--force", "--wait=false")
    await eventually("the claim deleted", lambda: claim_gone(cluster, namespace, claim_uid), within=90)
    assert plugin.sim.checkpoint().claims[claim_uid].state == ClaimState.PREPARE_STARTED  # nobody touched it

    plugin.start()
    stale = f"Checkpointed RC cleanup: unprepared stale claim: {namespace}/"
    await eventually("the plugin's own cleanup", lambda: plugin.logged(stale), within=60)
    # Unprepared: what remains is the PrepareAborted tombstone, forgotten after 90 s (docs/data-path.md §12).
    assert plugin.sim.checkpoint().claims[claim_uid].state == ClaimState.PREPARE_ABORTED
    await eventually("node label removed", lambda: LABEL not in node_labels(cluster, NODE))
