"""Channel isolation end to end (docs/channel-isolation.md): one IMEX channel per ComputeDomain.

The rack: four nodes of one NVLink clique under HostManagedIMEX (one host IMEX domain spanning them),
imexdra installed with ``resources.computeDomains.imex.isolation=channel``. The controller gives each
domain its own channel number; each node publishes channel-1..2047 in one pool of 16 slices; the
scheduler allocates exactly the domain's channel through the template's CEL selector; the plugin
injects only that channel and refuses a claim holding another domain's channel (which the chart's
admission policy refuses first: such a claim is hand-written, docs/tenancy.md).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from imexdra.api.constants import DRIVER_NAME
from imexdra_sim import rack
from imexdra_sim.builders import compute_domain
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.e2e.helpers import (
    channel_pod,
    domain_status,
    exported_handle,
    fresh_namespace,
    injected_channel_devices,
    probe_outcome,
    probe_pod,
)
from tests.events import driver_prepare_failure
from tests.support.kubectl import apply, get_json
from tests.support.waiting import wait_until

CHANNEL_DIR = "/dev/nvidia-caps-imex-channels"
CLAIM_POLICY_BINDING = f"{rack.RELEASE}-tenant-resourceclaims"
HAND_WRITTEN_REFUSED = "its claims are made by Kubernetes from the ComputeDomain's ResourceClaimTemplate"
NODES = [f"gb200-{i:02d}" for i in range(4)]


@pytest.fixture
def namespace(channel_isolation_rack: LocalCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace per test, emptied afterwards."""
    yield from fresh_namespace(channel_isolation_rack, request)


def ready_channel(cluster: LocalCluster, namespace: str, name: str) -> int:
    """Wait until the domain is Ready with a channel recorded; return the channel."""

    def channel() -> int | None:
        status = domain_status(cluster, namespace, name)
        number = status.get("channel")
        return number if status.get("status") == "Ready" and isinstance(number, int) else None

    number: int = wait_until(f"ComputeDomain {name} Ready with a channel", channel, timeout=120)
    return number


def running(cluster: LocalCluster, namespace: str, names: list[str]) -> list[dict[str, Any]]:
    """Wait until every named pod runs; return them."""

    def pods() -> list[dict[str, Any]] | None:
        items = get_json(cluster, "pods", "-n", namespace)["items"]
        by_name = {p["metadata"]["name"]: p for p in items if p["status"].get("phase") == "Running"}
        return [by_name[n] for n in names] if all(n in by_name for n in names) else None

    result: list[dict[str, Any]] = wait_until(f"{len(names)} pods Running", pods, timeout=240)
    return result


def node_pool(cluster: LocalCluster, node: str) -> list[dict[str, Any]] | None:
    """The node's slices of its newest pool generation once all of them are in the API, else None."""
    slices = [
        s
        for s in get_json(cluster, "resourceslices")["items"]
        if s["spec"]["driver"] == DRIVER_NAME and s["spec"].get("nodeName") == node
    ]
    if not slices:
        return None
    generation = max(s["spec"]["pool"]["generation"] for s in slices)
    newest = [s for s in slices if s["spec"]["pool"]["generation"] == generation]
    return newest if len(newest) == newest[0]["spec"]["pool"]["resourceSliceCount"] else None


def test_every_node_publishes_its_channels_in_one_pool(channel_isolation_rack: LocalCluster) -> None:
    """Each node's pool: 16 slices of one generation, 2047 devices channel-1..2047, no channel-0."""
    for node in NODES:
        pool = wait_until(
            f"{node}'s pool complete", lambda node=node: node_pool(channel_isolation_rack, node)
        )
        assert len(pool) == 16, node
        ids = sorted(d["attributes"]["id"]["int"] for s in pool for d in s["spec"]["devices"])
        assert ids == list(range(1, 2048)), node


def test_two_domains_on_the_same_four_nodes_each_see_only_their_channel(
    channel_isolation_rack: LocalCluster, namespace: str
) -> None:
    """Domains A and B both Ready with distinct channels; on each of four nodes a pod of each runs,
    and each pod's container gets exactly its own domain's channel device."""
    cluster = channel_isolation_rack
    apply(cluster, compute_domain("team-a", namespace), compute_domain("team-b", namespace))
    channels = {name: ready_channel(cluster, namespace, name) for name in ("team-a", "team-b")}
    assert channels["team-a"] != channels["team-b"]
    assert min(channels.values()) >= 1
    pods = [
        channel_pod(f"{domain}-{node}", namespace, f"{domain}-channel", node=node)
        for node in NODES
        for domain in ("team-a", "team-b")
    ]
    apply(cluster, *pods)
    for pod in running(cluster, namespace, [p["metadata"]["name"] for p in pods]):
        domain = pod["metadata"]["name"].rsplit("-gb200", 1)[0]
        assert injected_channel_devices(cluster, pod) == [f"{CHANNEL_DIR}/channel{channels[domain]}"]


def test_eight_domains_share_one_node(channel_isolation_rack: LocalCluster, namespace: str) -> None:
    """Eight domains' pods on one node, all Running, each with its own channel and no other."""
    cluster = channel_isolation_rack
    names = [f"job-{i}" for i in range(8)]
    apply(cluster, *(compute_domain(name, namespace) for name in names))
    channels = {name: ready_channel(cluster, namespace, name) for name in names}
    assert len(set(channels.values())) == 8
    apply(cluster, *(channel_pod(name, namespace, f"{name}-channel", node=NODES[0]) for name in names))
    for pod in running(cluster, namespace, names):
        expected = [f"{CHANNEL_DIR}/channel{channels[pod['metadata']['name']]}"]
        assert injected_channel_devices(cluster, pod) == expected


def test_only_holders_of_the_exporters_channel_import_its_memory(
    channel_isolation_rack: LocalCluster, namespace: str
) -> None:
    """Through the fake fabric (docs/fake-fabric.md): A's probe on gb200-00 exports on A's channel;
    B's probe on the same node is refused (the fabric names both channels), a probe holding no
    channel is refused, and A's probe on gb200-01 imports it across nodes, relayed in the IMEX domain.
    """
    cluster = channel_isolation_rack
    apply(cluster, compute_domain("team-a", namespace), compute_domain("team-b", namespace))
    channels = {name: ready_channel(cluster, namespace, name) for name in ("team-a", "team-b")}
    apply(cluster, probe_pod(cluster, "a-export", namespace, "team-a-channel", NODES[0], "export"))
    handle, exported_on = exported_handle(cluster, namespace, "a-export")
    assert exported_on == channels["team-a"]
    importers = {
        "b-same-node": ("team-b-channel", NODES[0]),
        "none-same-node": (None, NODES[0]),
        "a-other-node": ("team-a-channel", NODES[1]),
    }
    apply(
        cluster,
        *(
            probe_pod(cluster, name, namespace, template, node, "import", handle)
            for name, (template, node) in importers.items()
        ),
    )
    outcomes = {name: probe_outcome(cluster, namespace, name) for name in importers}
    refused_b = f"exported on IMEX channel {channels['team-a']}; the caller holds [{channels['team-b']}]"
    assert outcomes["b-same-node"][0] == "Failed" and refused_b in outcomes["b-same-node"][1][-1]
    assert outcomes["none-same-node"][0] == "Failed"
    assert "the caller holds no channel" in outcomes["none-same-node"][1][-1]
    imported = f"imported {handle} on IMEX channel {channels['team-a']}"
    held = f"holding IMEX channels [channel{channels['team-a']}]"
    assert outcomes["a-other-node"] == ("Succeeded", [held, imported])


def dry_run(cluster: LocalCluster, obj: dict[str, Any]) -> str | None:
    """None when the API server would admit ``obj``; else its error text."""
    result = cluster.kubectl("create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(obj), check=False)
    return None if result.returncode == 0 else result.stderr


@contextlib.contextmanager
def claim_policy_lifted(cluster: LocalCluster, probe: dict[str, Any]) -> Iterator[None]:
    """The chart's ResourceClaim policy binding deleted until ``probe`` is admitted, then restored."""
    saved = get_json(cluster, "validatingadmissionpolicybinding", CLAIM_POLICY_BINDING)
    saved["metadata"] = {k: v for k, v in saved["metadata"].items() if k in ("name", "labels")}
    cluster.kubectl("delete", "validatingadmissionpolicybinding", CLAIM_POLICY_BINDING)
    try:
        wait_until("the claim policy lifted", lambda: dry_run(cluster, probe) is None, timeout=60)
        yield
    finally:
        apply(cluster, saved)
        wait_until("the claim policy enforced again", lambda: dry_run(cluster, probe) is not None, timeout=60)


def test_a_claim_on_another_domains_channel_is_refused_with_a_pod_event(
    channel_isolation_rack: LocalCluster, namespace: str
) -> None:
    """A hand-written claim asking for B's channel with A's config: refused at admission; with the
    policy lifted, allocated (the scheduler cannot know), but the plugin refuses it for good, naming
    both numbers.
    """
    cluster = channel_isolation_rack
    apply(cluster, compute_domain("team-a", namespace), compute_domain("team-b", namespace))
    channel_b = ready_channel(cluster, namespace, "team-b")
    channel_a = ready_channel(cluster, namespace, "team-a")
    uid_a = get_json(cluster, "computedomain", "team-a", "-n", namespace)["metadata"]["uid"]
    template_b = get_json(cluster, "resourceclaimtemplate", "team-b-channel", "-n", namespace)
    spec = copy.deepcopy(template_b["spec"]["spec"])
    [entry] = spec["devices"]["config"]
    entry["opaque"]["parameters"]["domainID"] = uid_a
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "forged", "namespace": namespace},
        "spec": spec,
    }
    refusal = dry_run(cluster, claim)
    assert refusal is not None and HAND_WRITTEN_REFUSED in refusal, refusal
    thief = channel_pod("thief", namespace, "unused", node=NODES[1])
    thief["spec"]["resourceClaims"] = [{"name": "imex-channel", "resourceClaimName": "forged"}]
    with claim_policy_lifted(cluster, claim):
        created = cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([claim, thief]), check=False)
    assert created.returncode == 0, created.stderr
    event = wait_until(
        "the plugin's refusal on the pod", lambda: driver_prepare_failure(cluster, namespace, "thief")
    )
    assert f"claim was allocated channel-{channel_b} but ComputeDomain {namespace}/team-a" in event["message"]
    assert f"has channel {channel_a}" in event["message"]
    pod = get_json(cluster, "pod", "thief", "-n", namespace)
    assert pod["status"].get("phase") == "Pending"
    assert not any(
        r["pod_uid"] == pod["metadata"]["uid"] for r in cluster.node(NODES[1]).cri_records("CreateContainer")
    )


def test_the_chart_installed_channel_isolation(channel_isolation_rack: LocalCluster) -> None:
    """Both binaries run with IMEX_ISOLATION=channel and the channel DeviceClass is installed."""
    cluster = channel_isolation_rack
    deployments = get_json(cluster, "deployments,daemonsets", "-n", rack.DRIVER_NAMESPACE)["items"]
    for workload in deployments:
        env = {
            e["name"]: e.get("value")
            for c in workload["spec"]["template"]["spec"]["containers"]
            for e in c.get("env", [])
        }
        assert env.get("IMEX_ISOLATION") == "channel", workload["metadata"]["name"]
    classes = {c["metadata"]["name"] for c in get_json(cluster, "deviceclasses")["items"]}
    assert "compute-domain-channel.nvidia.com" in classes
