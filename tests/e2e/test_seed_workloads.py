"""The seeds' workloads as written, on simulated GB200 trays.

CoreWeave's GB200 MPIJob (18 workers of 4 GPUs, 110 CPUs and 960 GiB each, the launcher's 2 CPUs, the
clique pod affinity) and NVIDIA's ComputeDomain Deployment (18 replicas, its ``cd-0`` claim) run as
``imexdra_sim.seedworkloads`` holds them, on a full rack of 18 containerd trays, one worker or replica
per tray. The nodes are trays to their kubelets (docs/node-runtime.md §8), so the scheduler and each kubelet's
admission take the seeds' requests as a real rack's would: one pod per tray. Every container is given
its IMEX channel (the runtime's CDI devices) and the domain is Ready.
"""

from __future__ import annotations

import functools
from typing import Any

from imexdra_sim import demo, seedworkloads
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.e2e.helpers import WORKER_SELECTOR, channels_in_logs, domain_status, run_seed_job
from tests.support.kubectl import apply, get_json
from tests.support.waiting import wait_until

CHANNEL0 = "/dev/nvidia-caps-imex-channels/channel0"
DEPLOYMENT_NAMESPACE = "mnnvl-workload"


def trays(cluster: LocalCluster) -> int:
    """How many GB200 trays the rack has (the simulated GPU nodes)."""
    return len([n for n in cluster.nodes if n.name.startswith("gb200-")])


def domain_ready(cluster: LocalCluster, namespace: str, name: str) -> bool:
    """Whether the ComputeDomain's status says Ready."""
    return domain_status(cluster, namespace, name).get("status") == "Ready"


def delete_and_wait(cluster: LocalCluster, namespace: str, *objects: tuple[str, str]) -> None:
    """Delete each (kind, name) and wait until it is gone, as a user ending the workload does."""
    for kind, name in objects:
        cluster.kubectl("delete", kind, name, "-n", namespace, "--wait=true", timeout=300)


def test_the_nodes_are_gb200_trays(seed_rack: LocalCluster) -> None:
    """Every GPU node reports a tray's size: 144 CPUs, 1 TiB, 4 GPUs (the kubelet's own figures)."""
    nodes = [n for n in get_json(seed_rack, "nodes")["items"] if n["metadata"]["name"].startswith("gb200-")]
    assert len(nodes) == trays(seed_rack) > 0
    for node in nodes:
        capacity = node["status"]["capacity"]
        assert (capacity["cpu"], capacity["memory"], capacity["nvidia.com/gpu"]) == ("144", "1Ti", "4")


def test_the_seed_mpijob_runs_as_written(seed_rack: LocalCluster) -> None:
    """One worker per tray, Running with the seed's requests and given channel0; the domain Ready."""
    count = trays(seed_rack)
    workers = run_seed_job(seed_rack, workers=count)
    namespace = demo.WORKLOAD_NAMESPACE
    assert len({w["spec"]["nodeName"] for w in workers}) == count
    for worker in workers:
        [container] = worker["spec"]["containers"]
        assert container["resources"]["requests"] == {"cpu": "110", "memory": "960Gi", "nvidia.com/gpu": "4"}
        assert channels_in_logs(seed_rack, worker) == [CHANNEL0]
    wait_until(
        "the seed's domain Ready", lambda: domain_ready(seed_rack, namespace, demo.DOMAIN), timeout=120
    )
    delete_and_wait(seed_rack, namespace, ("mpijob", demo.JOB), ("computedomain", demo.DOMAIN))
    wait_until(  # the garbage collector removes the job's pods after the job
        "the workers gone",
        lambda: not get_json(seed_rack, "pods", "-n", namespace, "-l", WORKER_SELECTOR)["items"],
        timeout=120,
    )


def test_the_computedomain_deployment_runs_as_written(seed_rack: LocalCluster) -> None:
    """One replica per tray, Running and given channel0; compute-domain-0 is Ready."""
    count = trays(seed_rack)
    seed_rack.create_namespace(DEPLOYMENT_NAMESPACE)
    apply(seed_rack, *seedworkloads.computedomain_deployment(DEPLOYMENT_NAMESPACE, replicas=count))

    def running() -> list[dict[str, Any]] | None:
        pods = get_json(seed_rack, "pods", "-n", DEPLOYMENT_NAMESPACE, "-l", "job=ex1")["items"]
        ready = [p for p in pods if p["status"].get("phase") == "Running"]
        return ready if len(ready) == count else None

    pods = wait_until(f"{count} pods of example-mnnvl-workload Running", running, timeout=120 + 10 * count)
    assert len({p["spec"]["nodeName"] for p in pods}) == count
    for pod in pods:
        assert channels_in_logs(seed_rack, pod) == [CHANNEL0]
    ready = functools.partial(domain_ready, seed_rack, DEPLOYMENT_NAMESPACE, "compute-domain-0")
    wait_until("compute-domain-0 Ready", ready, timeout=120)
    delete_and_wait(
        seed_rack,
        DEPLOYMENT_NAMESPACE,
        ("deployment", "example-mnnvl-workload"),
        ("computedomain", "compute-domain-0"),
    )
    wait_until(
        "the Deployment's pods gone",
        lambda: not get_json(seed_rack, "pods", "-n", DEPLOYMENT_NAMESPACE, "-l", "job=ex1")["items"],
        timeout=120,
    )
