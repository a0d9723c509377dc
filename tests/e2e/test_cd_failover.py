"""Upstream's test_cd_failover.bats faults, injected into the seed MPIJob on a driver-managed rack.

Faults: force-delete all IMEX daemon pods (upstream test 9), force-delete a worker (test 8) and
regular-delete a worker (test 10).

Upstream judges recovery by nvbandwidth finishing; the simulated workers run no CUDA, so recovery is
judged by what the driver controls: daemons recreated and Ready in the domain's status, every node's
(fake) nvidia-imex connected to the new daemons' addresses, the workers untouched by a daemon fault, and
a replaced worker prepared with channel0 again.
"""

from __future__ import annotations

from typing import Any

import pytest

from imexdra_sim import demo, rack
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.e2e.helpers import (
    CHANNEL_DEVICE_DIR,
    COMPUTE_DOMAIN_LABEL,
    WORKER_SELECTOR,
    domain_status,
    imex_domain_view,
    injected_channel_devices,
    run_seed_job,
)
from tests.support.kubectl import get_json
from tests.support.waiting import wait_until


@pytest.fixture(scope="module")
def domain_uid(driver_managed_rack: LocalCluster) -> str:
    """Run the seed MPIJob (two workers) once for the module; return its ComputeDomain's UID."""
    run_seed_job(driver_managed_rack, workers=2)
    wait_until("ComputeDomain Ready", lambda: _domain_ready(driver_managed_rack), timeout=120)
    uid: str = get_json(driver_managed_rack, "computedomain", demo.DOMAIN, "-n", demo.WORKLOAD_NAMESPACE)[
        "metadata"
    ]["uid"]
    return uid


def test_force_deleting_all_imex_daemons_heals(driver_managed_rack: LocalCluster, domain_uid: str) -> None:
    """Force-deleted daemon pods come back Ready in the domain; the running workers are not disturbed."""
    cluster = driver_managed_rack
    workers_before = {w["metadata"]["name"]: w["metadata"]["uid"] for w in _workers(cluster)}
    old_daemons = {p["metadata"]["name"] for p in _daemon_pods(cluster, domain_uid)}
    assert len(old_daemons) == 2

    cluster.kubectl(
        "delete",
        "pods",
        "-n",
        rack.DRIVER_NAMESPACE,
        "-l",
        COMPUTE_DOMAIN_LABEL,
        "--grace-period=0",
        "--force",
    )

    def healed() -> list[dict[str, Any]] | None:
        pods = _daemon_pods(cluster, domain_uid)
        new = [p for p in pods if p["metadata"]["name"] not in old_daemons and _is_ready(p)]
        return new if len(pods) == len(new) == 2 else None

    new_daemons = wait_until("two recreated daemon pods Ready", healed, timeout=180)
    daemon_nodes = {p["spec"]["nodeName"]: p["status"]["podIP"] for p in new_daemons}

    def domain_reflects_new_daemons() -> dict[str, Any] | None:
        status = domain_status(cluster, demo.WORKLOAD_NAMESPACE, demo.DOMAIN)
        nodes = {n["name"]: (n["ipAddress"], n["status"]) for n in status.get("nodes", [])}
        wanted = {name: (ip, "Ready") for name, ip in daemon_nodes.items()}
        return status if status.get("status") == "Ready" and nodes == wanted else None

    wait_until("ComputeDomain Ready with the recreated daemons", domain_reflects_new_daemons, timeout=120)

    def imex_reconnected() -> bool:
        views = [imex_domain_view(cluster, node, domain_uid) for node in daemon_nodes]
        return all(
            view is not None and _connected_peers(view) == set(daemon_nodes.values()) for view in views
        )

    wait_until("each node's IMEX connected to both recreated daemons", imex_reconnected, timeout=60)
    workers_after = _workers(cluster)
    assert {w["metadata"]["name"]: w["metadata"]["uid"] for w in workers_after} == workers_before
    for worker in workers_after:
        assert worker["status"]["phase"] == "Running"
        assert [c["restartCount"] for c in worker["status"]["containerStatuses"]] == [0]


@pytest.mark.parametrize(
    "delete_flags",
    [pytest.param(("--grace-period=0", "--force"), id="force-delete"), pytest.param((), id="regular-delete")],
)
def test_deleted_worker_pod_is_recreated_with_channel0(
    driver_managed_rack: LocalCluster, domain_uid: str, delete_flags: tuple[str, ...]
) -> None:
    """A deleted MPI worker is recreated by the operator and prepared with channel0 again."""
    cluster = driver_managed_rack
    victim, survivor = sorted(_workers(cluster), key=lambda w: w["metadata"]["name"])
    name = victim["metadata"]["name"]

    cluster.kubectl("delete", "pod", name, "-n", demo.WORKLOAD_NAMESPACE, "--wait=false", *delete_flags)

    def replacement() -> dict[str, Any] | None:
        for pod in _workers(cluster):
            if pod["metadata"]["name"] == name and pod["metadata"]["uid"] != victim["metadata"]["uid"]:
                return pod if pod["status"].get("phase") == "Running" else None
        return None

    new_pod = wait_until(f"{name} recreated and Running", replacement, timeout=240)
    assert injected_channel_devices(cluster, new_pod) == [f"{CHANNEL_DEVICE_DIR}/channel0"]
    assert {w["metadata"]["uid"] for w in _workers(cluster)} == {
        new_pod["metadata"]["uid"],
        survivor["metadata"]["uid"],
    }
    wait_until("ComputeDomain Ready again", lambda: _domain_ready(cluster), timeout=120)


def _workers(cluster: LocalCluster) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = get_json(
        cluster, "pods", "-n", demo.WORKLOAD_NAMESPACE, "-l", WORKER_SELECTOR
    )["items"]
    return pods


def _daemon_pods(cluster: LocalCluster, domain_uid: str) -> list[dict[str, Any]]:
    """The domain's daemon pods, terminating ones excluded."""
    pods = get_json(
        cluster, "pods", "-n", rack.DRIVER_NAMESPACE, "-l", f"{COMPUTE_DOMAIN_LABEL}={domain_uid}"
    )
    return [p for p in pods["items"] if not p["metadata"].get("deletionTimestamp")]


def _connected_peers(view: dict[str, Any]) -> set[str]:
    """IPs of the IMEX nodes that are READY and connected to every other READY node."""
    ready = {index: node for index, node in view["nodes"].items() if node["status"] == "READY"}
    return {
        node["ip"] for node in ready.values() if all(node["connections"].get(other) == "C" for other in ready)
    }


def _is_ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))


def _domain_ready(cluster: LocalCluster) -> bool:
    return domain_status(cluster, demo.WORKLOAD_NAMESPACE, demo.DOMAIN).get("status") == "Ready"
