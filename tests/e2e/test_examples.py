"""Every file of examples/ as written, on a full rack of 18 simulated GB200 trays (containerd nodes).

- The seeds' workloads: CoreWeave's GB200 MPIJob (18 workers of 4 GPUs, 110 CPUs and 960 GiB each, the
  launcher's 2 CPUs, the clique pod affinity; ``examples/gb200-mpijob.yaml``) and NVIDIA's
  ComputeDomain Deployment (18 replicas, its ``cd-0`` claim; ``examples/computedomain-deployment.yaml``),
  one worker or replica per tray. The nodes are trays to their kubelets (docs/node-runtime.md §8), so
  the scheduler and each kubelet's admission take the seeds' requests as a real rack's would. Every
  container is given its IMEX channel (the runtime's CDI devices) and the domain is Ready.
- The one-pod files (``CHANNEL_EXAMPLES``: upstream-style demo specs, CoreWeave's minimal pod), applied
  with ``kubectl apply -f`` from the file: their ``bash -c`` command line runs in the ubuntu:22.04
  stand-in (Debian's bash and coreutils), and its ``ls -la`` lists the channels the pod was given,
  each a character device of the channel major.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Any

import pytest

from imexdra_sim import demo, examples, seedworkloads
from imexdra_sim.devices.procfs_fake import DEFAULT_IMEX_CHANNELS_MAJOR
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.e2e.helpers import (
    WORKER_SELECTOR,
    channels_in_logs,
    domain_status,
    pod_exists,
    ready_pod,
    remove_workloads,
    run_seed_job,
)
from tests.support.examples import CHANNEL_EXAMPLES
from tests.support.kubectl import apply, get_json
from tests.support.kubeversion import check_selected_kubernetes
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


def test_the_rack_runs_the_selected_kubernetes(
    seed_rack: LocalCluster, record_testsuite_property: Callable[[str, object], None]
) -> None:
    """The apiserver and every kubelet are the Kubernetes the harness selected (IMEXDRA_KUBE_VERSION)."""
    check_selected_kubernetes(seed_rack, record_testsuite_property)


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


#: One line of ``ls -la``: a character device's mode, links, owner, group, "major, minor", date, name.
LS_DEVICE = re.compile(r"^c\S*\s+\d+\s+\S+\s+\S+\s+(\d+),\s+(\d+)\s.*\s(channel\d+)$", re.MULTILINE)


def listed_devices(cluster: LocalCluster, namespace: str, pod: str) -> list[tuple[int, int, str]]:
    """(major, minor, name) of each character device the container's ``ls -la`` printed."""
    logs = cluster.kubectl("logs", pod, "-n", namespace, check=False).stdout
    return [(int(major), int(minor), name) for major, minor, name in LS_DEVICE.findall(logs)]


@pytest.mark.parametrize(("example", "channels"), CHANNEL_EXAMPLES.items(), ids=list(CHANNEL_EXAMPLES))
def test_a_demo_spec_runs_as_written(seed_rack: LocalCluster, example: str, channels: list[int]) -> None:
    """The file's pod runs its bash command line and lists its channels; its domain is Ready; it deletes."""
    domain, pod = (item["metadata"]["name"] for item in examples.load(example))
    namespace = f"example-{example.removesuffix('.yaml')}"
    seed_rack.create_namespace(namespace)
    path = str(examples.EXAMPLES / example)
    try:
        seed_rack.kubectl("apply", "-n", namespace, "-f", path)
        wait_until(f"{pod} Ready", lambda: ready_pod(seed_rack, namespace, pod), timeout=120)

        def listing() -> list[tuple[int, int, str]] | None:
            found = listed_devices(seed_rack, namespace, pod)
            return found if len(found) >= len(channels) else None

        listed = wait_until(f"{pod}'s listing of {len(channels)} channels", listing, timeout=60)
        expected = [(DEFAULT_IMEX_CHANNELS_MAJOR, n, f"channel{n}") for n in channels]
        assert sorted(listed) == sorted(expected)
        wait_until(f"{domain} Ready", lambda: domain_ready(seed_rack, namespace, domain), timeout=120)
        seed_rack.kubectl("delete", "-n", namespace, "-f", path, "--wait=true", timeout=120)
        wait_until(f"{pod} gone", lambda: not pod_exists(seed_rack, namespace, pod), timeout=60)
    finally:
        remove_workloads(seed_rack, namespace)
