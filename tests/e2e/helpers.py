"""Shared steps of the e2e tests: workloads from the seeds and what a user would check."""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from imexdra.api.constants import DRIVER_NAME
from imexdra.common.observability.logformat import parse_line
from imexdra.kubeletplugin.cdi.files import claim_spec_path
from imexdra.kubeletplugin.checkpoint.model import unmarshal
from imexdra_sim import demo, rack, seedworkloads
from imexdra_sim.builders import compute_domain
from imexdra_sim.devices.fakeimex.install import install_fake_imex
from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.localcluster.credentials import service_account_kubeconfig
from tests.support import builders
from tests.support.cli import imexdra
from tests.support.kubectl import apply, get_json, uid_of
from tests.support.waiting import wait_until

WORKER_SELECTOR = "training.kubeflow.org/job-role=worker"


#: The pod e2e tests run against a domain: the one builder, with the seed's image (the rack's runtime
#: pulls real images) and the seed's claim name, at the cluster's default grace period.
channel_pod = functools.partial(
    builders.channel_pod, image=seedworkloads.IMAGE, claim="imex-channel", grace_seconds=None
)


def injected_channel_devices(cluster: LocalCluster, pod: dict[str, Any]) -> list[str]:
    """Device node paths the runtime got for the pod's containers, through the CDI specs on its node."""
    node = cluster.node(pod["spec"]["nodeName"])
    creates = [r for r in node.cri_records("CreateContainer") if r["pod_uid"] == pod["metadata"]["uid"]]
    assert creates, f"no container of {pod['metadata']['name']} was created"
    return demo.device_paths(node.host_dir / rack.CDI_ROOT.lstrip("/"), creates[-1]["cdi_devices"])


def channels_in_logs(cluster: LocalCluster, pod: dict[str, Any]) -> list[str]:
    """The IMEX channels a seed workload's container found as character devices, from its own log.

    The workload stand-ins (tools/image/workload-stand-in) print one line per channel; waits until the
    container has printed them.
    """
    name, namespace = pod["metadata"]["name"], pod["metadata"]["namespace"]
    marker = re.compile(r"^IMEX channel (\S+): character device ", re.MULTILINE)

    def found() -> list[str]:
        logs = cluster.kubectl("logs", name, "-n", namespace, check=False).stdout
        return [f"{CHANNEL_DEVICE_DIR}/{channel}" for channel in marker.findall(logs)]

    channels: list[str] = wait_until(f"{name}'s channel listing", found, timeout=60)
    return channels


def run_seed_job(cluster: LocalCluster, workers: int) -> list[dict[str, Any]]:
    """Submit the seed's ComputeDomain and MPIJob and wait until every worker runs; return the workers."""
    cluster.create_namespace(demo.WORKLOAD_NAMESPACE)
    apply(cluster, *seedworkloads.mpijob(demo.WORKLOAD_NAMESPACE, workers=workers))

    def running_workers() -> list[dict[str, Any]] | None:
        pods = get_json(cluster, "pods", "-n", demo.WORKLOAD_NAMESPACE, "-l", WORKER_SELECTOR)["items"]
        running = [p for p in pods if p["status"].get("phase") == "Running"]
        return running if len(running) == workers else None

    timeout = 120 + 10 * workers  # containerd nodes: every worker's sandbox, IMEX daemon and claim
    result: list[dict[str, Any]] = wait_until(
        f"{workers} MPI workers Running", running_workers, timeout=timeout
    )
    return result


# -- upstream test_cd_* scenarios (tests/e2e/test_cd_*.py) ---------------------------------------

CHANNEL_DEVICE_DIR = "/dev/nvidia-caps-imex-channels"
COMPUTE_DOMAIN_LABEL = "resource.nvidia.com/computeDomain"
"""Label key on daemon pods, daemon objects and the nodes a domain's claims are prepared on."""


def ready_pod(cluster: LocalCluster, namespace: str, name: str) -> dict[str, Any] | None:
    """The pod if it exists and its Ready condition is True, else None."""
    found = cluster.kubectl("get", "pod", name, "-n", namespace, "--ignore-not-found", "-o", "json").stdout
    if not found.strip():
        return None
    pod: dict[str, Any] = json.loads(found)
    conditions = pod["status"].get("conditions", [])
    return pod if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions) else None


def pod_phase(cluster: LocalCluster, namespace: str, name: str) -> str:
    """A pod's phase, or "" when it does not exist."""
    found = cluster.kubectl(
        "get", "pod", name, "-n", namespace, "-o", "jsonpath={.status.phase}", check=False
    )
    return found.stdout if found.returncode == 0 else ""


def pod_exists(cluster: LocalCluster, namespace: str, name: str) -> bool:
    """Whether the API still has the pod (terminating ones included)."""
    return bool(
        cluster.kubectl("get", "pod", name, "-n", namespace, "--ignore-not-found", "-o", "name").stdout
    )


def domain_status(cluster: LocalCluster, namespace: str, name: str) -> dict[str, Any]:
    """A ComputeDomain's ``.status`` as the API returns it (``{}`` before the controller wrote one)."""
    status: dict[str, Any] = get_json(cluster, "computedomain", name, "-n", namespace).get("status", {})
    return status


def remove_workloads(cluster: LocalCluster, namespace: str, timeout: float = 180) -> None:
    """Delete a namespace's pods, claims and ComputeDomains; wait until no node is labelled for a domain.

    Each node offers only IMEX channel 0 and carries one domain's label at a time, so a test on a shared
    rack leaves it as it found it.
    """
    for kind in ("pods", "resourceclaims", "computedomains"):
        cluster.kubectl("delete", kind, "--all", "-n", namespace, "--wait=true", timeout=timeout)
    wait_until(
        "no node labelled for a ComputeDomain",
        lambda: not cluster.kubectl("get", "nodes", "-l", COMPUTE_DOMAIN_LABEL, "-o", "name").stdout.strip(),
        timeout=timeout,
    )


def imex_domain_view(cluster: LocalCluster, node: str, domain_uid: str) -> dict[str, Any] | None:
    """``nvidia-imex-ctl -N -j`` against a node's IMEX daemon of a domain (the fake IMEX), or None.

    None while the daemon's config is missing or its IMEX does not answer (e.g. during a restart).
    """
    config = cluster.node(node).plugins_dir / DRIVER_NAME / "domains" / domain_uid / "imexd.cfg"
    if not config.is_file():
        return None
    ctl = [sys.executable, "-m", "imexdra_sim.devices.fakeimex.ctl", "-c", str(config), "-N", "-j"]
    result = subprocess.run(ctl, capture_output=True, text=True, timeout=30, check=False)
    if result.returncode != 0:
        return None
    view: dict[str, Any] = json.loads(result.stdout)
    return view


# -- the chart's own pods (upstream test_cd_leader_election / test_cd_logging) --------------------

CONTROLLER_SELECTOR = "imexdra-component=controller"
PLUGIN_SELECTOR = "imexdra-component=kubelet-plugin"


def driver_pods(cluster: LocalCluster, selector: str) -> list[dict[str, Any]]:
    """The driver namespace's pods matching ``selector``, terminating ones excluded."""
    pods = get_json(cluster, "pods", "-n", rack.DRIVER_NAMESPACE, "-l", selector)["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def is_ready(pod: dict[str, Any]) -> bool:
    """Whether the pod is Running with its Ready condition True."""
    conditions = pod["status"].get("conditions", [])
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
    return ready and pod["status"].get("phase") == "Running"


def container_log(cluster: LocalCluster, pod: dict[str, Any]) -> list[str]:
    """The pod's newest container's log lines, read from its CRI log file (``kubectl logs`` needs a
    kubelet server the harness does not run); the CRI prefix (time, stream, tag) is stripped."""
    node = cluster.node(pod["spec"]["nodeName"])
    creates = [r for r in node.cri_records("CreateContainer") if r.get("pod_uid") == pod["metadata"]["uid"]]
    assert creates, f"no container of {pod['metadata']['name']} was created"
    text = Path(str(creates[-1]["log_path"])).read_text(errors="replace")
    return [line.split(" ", 3)[-1] for line in text.splitlines() if line]


def log_events(lines: list[str]) -> list[dict[str, Any]]:
    """The log lines among ``lines``, decoded: ``msg`` and the keys (the chart's pods log klog's text)."""
    return [entry for entry in map(parse_line, lines) if entry is not None]


def fresh_namespace(cluster: LocalCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace named after the test; afterwards emptied, so the next test finds every channel free."""
    name = request.node.name.replace("_", "-")[:50].strip("-")
    cluster.create_namespace(name)
    yield name
    remove_workloads(cluster, name)


# -- a tenant: a namespace user with Kubernetes' stock ``edit`` role (docs/tenancy.md) ---------------


def tenant_kubeconfig(cluster: LocalCluster, namespace: str) -> Path:
    """A ServiceAccount ``tenant`` in ``namespace`` (which must exist) with ClusterRole ``edit`` there."""
    cluster.kubectl("create", "serviceaccount", "tenant", "-n", namespace)
    cluster.kubectl(
        "create",
        "rolebinding",
        "tenant-edit",
        "--clusterrole=edit",
        f"--serviceaccount={namespace}:tenant",
        "-n",
        namespace,
    )
    return service_account_kubeconfig(cluster, namespace, "tenant")


def plugin_on(cluster: LocalCluster, node: str) -> dict[str, Any] | None:
    """The kubelet plugin pod on ``node``; None while there is not exactly one (a replacement starting)."""
    pods = [p for p in driver_pods(cluster, PLUGIN_SELECTOR) if p["spec"]["nodeName"] == node]
    return pods[0] if len(pods) == 1 else None


def ready_plugin_on(cluster: LocalCluster, node: str) -> dict[str, Any] | None:
    """The kubelet plugin pod on ``node`` once it is the only one and Ready."""
    pod = plugin_on(cluster, node)
    return pod if pod is not None and is_ready(pod) else None


def without_imex(cluster: LocalCluster, node: str) -> Iterator[str]:
    """``node``'s driver install without nvidia-imex/nvidia-imex-ctl (its plugin restarted to see it:
    a new base CDI spec, without the programs' mounts); afterwards the programs are back and the plugin
    restarted again, so the rack is whole. Yields ``node`` (for a fixture to yield from)."""
    programs = cluster.node(node).host_dir / "sim/driver-root/usr/bin"
    for name in ("nvidia-imex", "nvidia-imex-ctl"):
        (programs / name).unlink()
    restart_plugin(cluster, node)
    yield node
    install_fake_imex(programs)
    restart_plugin(cluster, node)


def restart_plugin(cluster: LocalCluster, node: str) -> None:
    """Delete the node's kubelet plugin pod and wait for its replacement to be Ready (a new base spec)."""
    old = wait_until(f"the kubelet plugin on {node}", lambda: plugin_on(cluster, node))
    cluster.kubectl("delete", "pod", old["metadata"]["name"], "-n", rack.DRIVER_NAMESPACE, timeout=120)
    wait_until(
        f"a new kubelet plugin Ready on {node}",
        lambda: (
            new
            if (new := ready_plugin_on(cluster, node)) and new["metadata"]["uid"] != old["metadata"]["uid"]
            else None
        ),
    )


# -- node loss (tests/e2e/test_node_loss*.py) ------------------------------------------------------


def start_domain_workload(
    cluster: LocalCluster, namespace: str, domain: str, nodes: list[str], *, num_nodes: int
) -> str:
    """Domain ``domain`` and one pod ``worker-<i>`` per node; wait until all run and the domain is Ready."""
    apply(cluster, compute_domain(domain, namespace, num_nodes=num_nodes))
    for i, node in enumerate(nodes):
        apply(cluster, channel_pod(f"worker-{i}", namespace, f"{domain}-channel", node=node))

    def all_running() -> bool:
        pods = get_json(cluster, "pods", "-n", namespace)["items"]
        return len(pods) == len(nodes) and all(p["status"].get("phase") == "Running" for p in pods)

    wait_until(f"{len(nodes)} workload pods Running", all_running, timeout=240)
    wait_until("the domain Ready", lambda: domain_status(cluster, namespace, domain).get("status") == "Ready")
    return uid_of(cluster, "computedomain", domain, namespace)


def ready_nodes(cluster: LocalCluster) -> list[str]:
    """The rack's nodes that are Ready now, by name."""
    nodes = get_json(cluster, "nodes")["items"]
    return sorted(
        n["metadata"]["name"]
        for n in nodes
        if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))
    )


def losable_nodes(cluster: LocalCluster) -> list[str]:
    """The Ready nodes a node-loss test may lose: all but the one the controller runs on.

    On a real cluster the controller runs on a CPU node (the chart's default affinity); the fakecri
    rack has only GPU nodes, so pulling the controller's tray would measure the controller's own
    eviction (five minutes), not how the driver reports a lost GPU node. CI once lost it that way.
    """
    controllers = {p["spec"].get("nodeName") for p in driver_pods(cluster, CONTROLLER_SELECTOR)}
    return [n for n in ready_nodes(cluster) if n not in controllers]


def workload_containers(cluster: LocalCluster, namespace: str) -> dict[str, tuple[str, str, int]]:
    """Node -> (pod UID, container ID, restart count) of the namespace's scheduled workload pods."""
    pods = get_json(cluster, "pods", "-n", namespace)["items"]
    return {p["spec"]["nodeName"]: container_state(p) for p in pods if p["spec"].get("nodeName")}


def container_state(pod: dict[str, Any]) -> tuple[str, str, int]:
    """(pod UID, container ID, restart count) of a one-container pod: changes if it restarts."""
    [status] = pod["status"].get("containerStatuses", [{}])
    return pod["metadata"]["uid"], status.get("containerID", ""), status.get("restartCount", 0)


def claim_uid_of(cluster: LocalCluster, namespace: str, pod: str) -> str:
    """The UID of the claim a workload pod got from the domain's template."""
    [status] = get_json(cluster, "pod", pod, "-n", namespace)["status"]["resourceClaimStatuses"]
    return uid_of(cluster, "resourceclaim", status["resourceClaimName"], namespace)


def prepared_on(cluster: LocalCluster, node: str) -> set[str]:
    """Claim UIDs in the node's kubelet-plugin checkpoint."""
    path = cluster.node(node).plugins_dir / DRIVER_NAME / "checkpoint.json"
    return set(unmarshal(path.read_bytes()).claims)


def cdi_spec(cluster: LocalCluster, node: str, claim_uid: str) -> Path:
    """Where the node's CDI spec of a claim is."""
    return claim_spec_path(cluster.node(node).host_dir / rack.CDI_ROOT.lstrip("/"), claim_uid)


def status_report(cluster: LocalCluster) -> dict[str, Any]:
    """``imexdra status -A -o json``, as an operator runs it."""
    result = imexdra(cluster, "status", "-A", "-o", "json")
    result.check_returncode()
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def force_delete_pod_on(cluster: LocalCluster, namespace: str, node: str) -> tuple[str, str]:
    """Force-delete the workload pod on a lost node, as an operator does; return (pod, its claim UID)."""
    [pod] = [p for p in get_json(cluster, "pods", "-n", namespace)["items"] if p["spec"]["nodeName"] == node]
    name = pod["metadata"]["name"]
    claim = claim_uid_of(cluster, namespace, name)
    cluster.kubectl("delete", "pod", name, "-n", namespace, "--force", "--grace-period=0")
    return name, claim


def restore_lost_nodes(cluster: LocalCluster) -> None:
    """Boot every lost node whose Node object still exists, so a failed test leaves a whole rack."""
    names = set(cluster.kubectl("get", "nodes", "-o", "name").stdout.replace("node/", "").split())
    for node in cluster.nodes:
        if node.name in names and not any(p.alive() for p in node.processes):
            rack.restore_node(cluster, node.name)


def node_loss_namespace(cluster: LocalCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """``fresh_namespace`` for tests that lose nodes: lost nodes come back before it is emptied."""
    namespaces = fresh_namespace(cluster, request)
    yield next(namespaces)
    restore_lost_nodes(cluster)
    next(namespaces, None)


def restore_and_resume(cluster: LocalCluster, lost: str, stale_claim: str, namespace: str, pod: str) -> None:
    """Bring ``lost`` back; wait until its plugin unprepared ``stale_claim`` (the claim of the pod
    force-deleted meanwhile: checkpoint entry and CDI spec gone) and the new ``pod`` there runs."""
    rack.restore_node(cluster, lost)
    wait_until(
        f"the stale claim unprepared on {lost}",
        lambda: (
            stale_claim not in prepared_on(cluster, lost)
            and not cdi_spec(cluster, lost, stale_claim).exists()
        ),
        timeout=180,
    )
    wait_until(
        f"the new pod on {lost} Running",
        lambda: is_ready(get_json(cluster, "pod", pod, "-n", namespace)),
        timeout=180,
    )


# -- the fake fabric's probe (docs/fake-fabric.md) ------------------------------------------------

EXPORTED = re.compile(r"^exported (\S+) on IMEX channel (\d+)$")


def probe_pod(
    cluster: LocalCluster, name: str, namespace: str, template: str | None, node: str, *argv: str
) -> dict[str, Any]:
    """A run-once pod of ``rack.PROBE_IMAGE`` on ``node`` running ``imex-probe`` with ``argv``
    against that node's fabric; it holds the channel of claim template ``template`` (None: no claim)."""
    pod = builders.channel_pod(name, namespace, template, node=node, image=rack.PROBE_IMAGE)
    op, *rest = argv
    fabric = rack.fabric_endpoint(cluster.node(node))
    pod["spec"]["restartPolicy"] = "Never"
    pod["spec"]["containers"][0]["command"] = ["imex-probe", op, "--fabric", fabric, *rest]
    return pod


def exported_handle(cluster: LocalCluster, namespace: str, name: str) -> tuple[str, int]:
    """Wait until the exporting probe pod ``name`` logs its export; return the handle and its channel."""

    def exported() -> tuple[str, int] | None:
        pod = get_json(cluster, "pod", name, "-n", namespace)
        if pod["status"].get("phase") != "Running":
            return None
        found = [m for line in container_log(cluster, pod) if (m := EXPORTED.match(line))]
        return (found[0][1], int(found[0][2])) if found else None

    result: tuple[str, int] = wait_until(f"probe {name} exported", exported, timeout=120)
    return result


def probe_outcome(cluster: LocalCluster, namespace: str, name: str) -> tuple[str, list[str]]:
    """Wait until the run-once probe pod ``name`` ends; return its phase and its log."""

    def ended() -> dict[str, Any] | None:
        pod: dict[str, Any] = get_json(cluster, "pod", name, "-n", namespace)
        return pod if pod["status"].get("phase") in ("Succeeded", "Failed") else None

    pod = wait_until(f"probe {name} done", ended, timeout=120)
    return pod["status"]["phase"], container_log(cluster, pod)


# -- binding conditions (tests/e2e/test_binding_conditions.py, test_host_managed.py) ----------------


def events_of(cluster: LocalCluster, namespace: str, reason: str) -> list[dict[str, Any]]:
    """The namespace's Events with ``reason``."""
    items: list[dict[str, Any]] = get_json(cluster, "events", "-n", namespace)["items"]
    return [e for e in items if e.get("reason") == reason]


def squat_then_run_victim(cluster: LocalCluster, *, victim: str, tenant: str, nodes: tuple[str, ...]) -> str:
    """Under binding conditions: a squatter can't keep a node from the team whose domain its claim names.

    The victim's ComputeDomain (in ``victim``); in ``tenant``, a hand-written channel claim naming it and
    a pod pinned to ``nodes[0]``. The squatter is told why (``ComputeDomainNotFound``, naming nothing of
    the victim's), then one victim pod per node runs; the squatter is never bound. Returns the domain's
    UID; the caller cleans up.
    """
    for namespace in (victim, tenant):
        cluster.create_namespace(namespace)
    apply(cluster, compute_domain("victim", victim, num_nodes=len(nodes)))
    uid = uid_of(cluster, "computedomain", "victim", victim)
    parameters = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomainChannelConfig",
        "domainID": uid,
    }
    request = {"name": "channel", "exactly": {"deviceClassName": "compute-domain-default-channel.nvidia.com"}}
    squat = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "squat", "namespace": tenant},
        "spec": {
            "devices": {
                "requests": [request],
                "config": [{"opaque": {"driver": DRIVER_NAME, "parameters": parameters}}],
            }
        },
    }
    apply(
        cluster, squat, builders.channel_pod("squatter", tenant, "squat", existing_claim=True, node=nodes[0])
    )
    [event] = wait_until(
        "the squatter told why", lambda: events_of(cluster, tenant, "ComputeDomainNotFound")[:1], timeout=60
    )
    assert f"namespace {tenant}" in event["message"] and victim not in event["message"]
    for i, node in enumerate(nodes):
        apply(cluster, builders.channel_pod(f"worker-{i}", victim, "victim-channel", node=node))

    def victim_running() -> bool:
        pods = get_json(cluster, "pods", "-n", victim)["items"]
        return len(pods) == len(nodes) and all(p["status"].get("phase") == "Running" for p in pods)

    wait_until(f"the victim's pods Running on {len(nodes)} nodes", victim_running, timeout=180)
    squatter = get_json(cluster, "pod", "squatter", "-n", tenant)
    assert not squatter["spec"].get("nodeName"), "the squatter was bound"
    return uid
