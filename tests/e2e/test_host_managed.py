"""HostManagedIMEX end to end on a simulated rack (docs/host-managed.md).

The rack: gb200-00 and gb200-01 share an NVLink clique and run their own host nvidia-imex (one IMEX
domain, command socket at the rack's ``hostSocketPath``), gb200-02 has no fabric. imexdra is installed
with ``featureGates.HostManagedIMEX=true``; it checks the host's nvidia-imex before preparing a channel
but never starts, stops or configures it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from imexdra_sim import demo, rack
from imexdra_sim.builders import compute_domain
from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.localcluster.credentials import kubectl_as
from imexdra_sim.localcluster.nodes import Node
from imexdra_sim.rack import upgrade_chart
from tests.e2e.helpers import (
    channel_pod,
    exported_handle,
    fresh_namespace,
    injected_channel_devices,
    pod_phase,
    probe_outcome,
    probe_pod,
    remove_workloads,
    run_seed_job,
    squat_then_run_victim,
    tenant_kubeconfig,
)
from tests.events import driver_prepare_failure, pod_events
from tests.support.kubectl import apply, get_json
from tests.support.waiting import wait_until

CHANNEL0 = "/dev/nvidia-caps-imex-channels/channel0"


def test_seed_mpijob_gets_channel0_and_no_daemons(host_managed_rack: LocalCluster) -> None:
    """The seed MPIJob runs with channel0 in every worker; no daemon DaemonSet or clique appears."""
    cluster = host_managed_rack
    workers = run_seed_job(cluster, workers=2)
    assert {w["spec"]["nodeName"] for w in workers} == {"gb200-00", "gb200-01"}  # clique affinity
    for worker in workers:
        assert injected_channel_devices(cluster, worker) == [CHANNEL0]
    claims = get_json(cluster, "resourceclaims", "-n", demo.WORKLOAD_NAMESPACE)["items"]
    assert len(claims) == 2 and all(c["status"].get("reservedFor") for c in claims)
    domain = get_json(cluster, "computedomain", demo.DOMAIN, "-n", demo.WORKLOAD_NAMESPACE)
    assert domain["status"]["status"] == "Ready"
    daemonsets = get_json(cluster, "daemonsets", "-n", rack.DRIVER_NAMESPACE)["items"]
    assert [d["metadata"]["name"] for d in daemonsets] == [f"{rack.RELEASE}-kubelet-plugin"]
    assert get_json(cluster, "computedomaincliques", "-A")["items"] == []

    cluster.kubectl("delete", "mpijob", demo.JOB, "-n", demo.WORKLOAD_NAMESPACE, timeout=120)
    cluster.kubectl("delete", "computedomain", demo.DOMAIN, "-n", demo.WORKLOAD_NAMESPACE, timeout=120)
    wait_until(
        "claims and claim template removed",
        lambda: (
            not get_json(cluster, "resourceclaims,resourceclaimtemplates", "-n", demo.WORKLOAD_NAMESPACE)[
                "items"
            ]
        ),
    )


@pytest.fixture
def namespace(host_managed_rack: LocalCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace per test, emptied afterwards; every node's host IMEX running again after it."""
    yield from fresh_namespace(host_managed_rack, request)
    for node in host_managed_rack.nodes:
        rack.ensure_host_imex(host_managed_rack, node)


def test_host_imex_down_keeps_the_pod_pending_with_an_event_until_it_is_up(
    host_managed_rack: LocalCluster, namespace: str
) -> None:
    """Host nvidia-imex stopped: the worker stays Pending, its event names the socket and what
    nvidia-imex-ctl said; ``systemctl start nvidia-imex`` again and the kubelet's retry runs it.
    """
    cluster = host_managed_rack
    node = cluster.node("gb200-01")
    rack.stop_host_imex(node)  # systemctl stop nvidia-imex
    assert _imex_processes_for(node) == []
    apply(cluster, compute_domain("cd", namespace, "ch"))
    apply(cluster, channel_pod("worker", namespace, "ch", node="gb200-01"))
    event = wait_until(
        "FailedPrepareDynamicResources", lambda: driver_prepare_failure(cluster, namespace, "worker")
    )
    assert (
        "host nvidia-imex daemon readiness check failed: host IMEX not ready at "
        f"{rack.HOST_SOCKET_PATH}: nvidia-imex-ctl -q exited 1"
    ) in event["message"]
    assert pod_phase(cluster, namespace, "worker") == "Pending"

    rack.start_host_imex(cluster, node)  # systemctl start nvidia-imex
    wait_until("worker Running", lambda: pod_phase(cluster, namespace, "worker") == "Running")
    assert injected_channel_devices(cluster, get_json(cluster, "pod", "worker", "-n", namespace)) == [
        CHANNEL0
    ]


def test_second_channel_claim_on_a_node_is_prevented(host_managed_rack: LocalCluster, namespace: str) -> None:
    """Two channel claims pinned to one node: the first runs, the second is never prepared there."""
    cluster = host_managed_rack
    apply(cluster, compute_domain("cd", namespace, "ch"))
    apply(cluster, channel_pod("first", namespace, "ch", node="gb200-00"))
    wait_until("first pod Running", lambda: pod_phase(cluster, namespace, "first") == "Running")
    apply(cluster, channel_pod("second", namespace, "ch", node="gb200-00"))
    wait_until(
        "scheduler refuses the second channel claim",
        lambda: any(e["reason"] == "FailedScheduling" for e in pod_events(cluster, namespace, "second")),
    )
    assert pod_phase(cluster, namespace, "second") == "Pending"


def test_under_domain_isolation_another_domains_pod_imports_the_memory(
    host_managed_rack: LocalCluster, namespace: str
) -> None:
    """The hole channel isolation closes (docs/fake-fabric.md §5): with every domain on channel 0,
    domain B's probe on gb200-01 imports what domain A's probe exported on gb200-00."""
    cluster = host_managed_rack
    apply(cluster, compute_domain("team-a", namespace, "a-ch"), compute_domain("team-b", namespace, "b-ch"))
    apply(cluster, probe_pod(cluster, "a-export", namespace, "a-ch", "gb200-00", "export"))
    handle, channel = exported_handle(cluster, namespace, "a-export")
    assert channel == 0
    apply(cluster, probe_pod(cluster, "b-import", namespace, "b-ch", "gb200-01", "import", handle))
    phase, log = probe_outcome(cluster, namespace, "b-import")
    assert (phase, log[-1]) == ("Succeeded", f"imported {handle} on IMEX channel 0")


def test_allocation_mode_all_is_a_permanent_prepare_error(
    host_managed_rack: LocalCluster, namespace: str
) -> None:
    """allocationMode All, asked for by a tenant with ``edit``: a clear permanent error, the pod never starts.

    Part of the tenant attack suite (docs/tenancy.md): All is refused wherever it is not allowed.
    """
    cluster = host_managed_rack
    tenant = tenant_kubeconfig(cluster, namespace)
    objects = [
        compute_domain("cd", namespace, "ch", mode="All"),
        channel_pod("all", namespace, "ch", node="gb200-01"),
    ]
    created = kubectl_as(cluster, tenant, "create", "-f", "-", input=yaml.safe_dump_all(objects))
    assert created.returncode == 0, created.stderr
    event = wait_until(
        "FailedPrepareDynamicResources", lambda: driver_prepare_failure(cluster, namespace, "all")
    )
    assert "allocationMode" in event["message"] and "All" in event["message"]
    assert pod_phase(cluster, namespace, "all") == "Pending"


def test_node_without_clique_is_a_permanent_prepare_error(
    host_managed_rack: LocalCluster, namespace: str
) -> None:
    """A node whose NVML reports no fabric fails prepare with a message naming the missing clique."""
    cluster = host_managed_rack
    apply(cluster, compute_domain("cd", namespace, "ch"))
    apply(cluster, channel_pod("noclique", namespace, "ch", node="gb200-02"))
    event = wait_until(
        "FailedPrepareDynamicResources", lambda: driver_prepare_failure(cluster, namespace, "noclique")
    )
    assert "clique" in event["message"].lower()
    assert pod_phase(cluster, namespace, "noclique") == "Pending"


def _plugin_pod(cluster: LocalCluster, node: str) -> dict[str, Any]:
    pods = get_json(cluster, "pods", "-n", rack.DRIVER_NAMESPACE, "--field-selector", f"spec.nodeName={node}")
    return next(
        p for p in pods["items"] if p["metadata"]["name"].startswith(f"{rack.RELEASE}-kubelet-plugin")
    )


def _restarts(pod: dict[str, Any]) -> int:
    return sum(int(s.get("restartCount", 0)) for s in pod["status"].get("containerStatuses", []))


def _imex_processes_for(node: Node) -> list[int]:
    """PIDs of the node's host nvidia-imex processes (what ``systemctl status`` would show)."""
    config = str(node.host_dir / "sim" / rack.HOST_IMEX_DIR / "config.cfg").encode()
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if any(arg.endswith(b"/nvidia-imex") for arg in argv) and config in argv:
            pids.append(int(cmdline.parent.name))
    return pids


def test_stopping_host_imex_is_not_acted_on(host_managed_rack: LocalCluster, namespace: str) -> None:
    """Host nvidia-imex stops under a running workload; the driver does nothing about it.

    Checked: the host service stays stopped (nothing restarts it), no pod restarts, the workload keeps
    running, and the kubelet plugin logs nothing about nvidia-imex. The seed's other half (the workload's
    next CUDA shareable-handle call fails) needs CUDA, which the simulated workload does not have.
    """
    cluster = host_managed_rack
    node = cluster.node("gb200-00")
    apply(cluster, compute_domain("cd", namespace, "ch"))
    apply(cluster, channel_pod("worker", namespace, "ch", node="gb200-00"))
    wait_until("worker Running", lambda: pod_phase(cluster, namespace, "worker") == "Running")
    plugin = _plugin_pod(cluster, "gb200-00")
    plugin_restarts = _restarts(plugin)
    # The plugin container's CRI log, as the kubelet would serve it.
    plugin_log = Path(
        next(
            r["log_path"]
            for r in cluster.node("gb200-00").cri_records("CreateContainer")
            if r.get("pod_name") == plugin["metadata"]["name"]
        )
    )
    logged_before = len(plugin_log.read_text().splitlines())
    assert logged_before > 0

    rack.stop_host_imex(node)  # systemctl stop nvidia-imex
    assert _imex_processes_for(node) == []
    # Nothing is expected to happen, so watch for longer than the plugin's periodic work and probes.
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        worker = get_json(cluster, "pod", "worker", "-n", namespace)
        assert worker["status"]["phase"] == "Running" and _restarts(worker) == 0
        assert _imex_processes_for(node) == [], "something restarted the host's nvidia-imex"
        time.sleep(1)
    assert _restarts(_plugin_pod(cluster, "gb200-00")) == plugin_restarts
    logged = plugin_log.read_text().splitlines()
    assert [line for line in logged[logged_before:] if "nvidia-imex" in line.lower()] == []


@pytest.fixture
def binding_conditions(host_managed_rack: LocalCluster) -> Iterator[None]:
    """The install with gate ComputeDomainBindingConditions on (controller, plugins restarted); off after."""
    upgrade_chart(host_managed_rack, {"featureGates": {"ComputeDomainBindingConditions": True}})
    # A claim allocated from a slice the plugin published before its restart has no binding condition.
    wait_until(
        "every node's slice with the binding conditions",
        lambda: rack.slices_follow_gate(host_managed_rack, True),
    )
    yield
    upgrade_chart(host_managed_rack, {"featureGates": {"ComputeDomainBindingConditions": False}})


def test_binding_conditions_release_a_squatting_claim(
    host_managed_rack: LocalCluster, binding_conditions: None
) -> None:
    """Host-managed, gate on: a claim naming another namespace's domain is handed back before binding,
    so the domain's own pods get both fabric nodes; their claims carry IMEXDaemonReady (namespace checked)."""
    cluster = host_managed_rack
    squat_then_run_victim(cluster, victim="team-a", tenant="team-b", nodes=("gb200-00", "gb200-01"))
    for claim in get_json(cluster, "resourceclaims", "-n", "team-a")["items"]:
        [device] = claim["status"]["devices"]
        assert [(c["type"], c["reason"]) for c in device["conditions"]] == [
            ("IMEXDaemonReady", "ComputeDomainFound")
        ]
    cluster.kubectl("delete", "pods,resourceclaims", "--all", "-n", "team-b", "--wait=true", timeout=120)
    remove_workloads(cluster, "team-a")
