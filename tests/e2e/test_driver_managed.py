"""Driver-managed IMEX end to end on a simulated rack: the seed flow with real daemon pods.

The controller's per-domain DaemonSet runs ``compute-domain-daemon`` on both nodes as host processes
(with the fake nvidia-imex); the workers' channels are prepared only once their node's daemon is ready.
"""

from __future__ import annotations

from imexdra.cli import demo, rack
from imexdra.localcluster.cluster import LocalCluster
from tests.e2e.helpers import get_json, injected_channel_devices, run_seed_job, wait_until


def test_seed_mpijob_with_imex_daemons(driver_managed_rack: LocalCluster) -> None:
    """Workers run with channel0; the domain is Ready with one Ready daemon per node in its clique."""
    cluster = driver_managed_rack
    workers = run_seed_job(cluster, workers=2)
    for worker in workers:
        assert injected_channel_devices(cluster, worker) == ["/dev/nvidia-caps-imex-channels/channel0"]
    domain = wait_until(
        "ComputeDomain Ready",
        lambda: (
            (d := get_json(cluster, "computedomain", demo.DOMAIN, "-n", demo.WORKLOAD_NAMESPACE))
            .get("status", {})
            .get("status")
            == "Ready"
            and d
        ),
    )
    assert {n["name"] for n in domain["status"]["nodes"]} == {"gb200-00", "gb200-01"}
    cliques = get_json(cluster, "computedomaincliques", "-n", rack.DRIVER_NAMESPACE)["items"]
    assert len(cliques) == 1
    daemons = cliques[0]["daemons"]
    assert sorted(d["index"] for d in daemons) == [0, 1]
    assert {d["status"] for d in daemons} == {"Ready"}
    daemon_pods = get_json(
        cluster,
        "pods",
        "-n",
        rack.DRIVER_NAMESPACE,
        "-l",
        f"resource.nvidia.com/computeDomain={domain['metadata']['uid']}",
    )
    assert len(daemon_pods["items"]) == 2

    cluster.kubectl("delete", "mpijob", demo.JOB, "-n", demo.WORKLOAD_NAMESPACE, timeout=120)
    cluster.kubectl("delete", "computedomain", demo.DOMAIN, "-n", demo.WORKLOAD_NAMESPACE, timeout=180)
    # The kubelet plugin's own DaemonSet shares the namespace: look only at the domain's objects.
    domain_label = f"resource.nvidia.com/computeDomain={domain['metadata']['uid']}"
    wait_until(
        "daemon DaemonSet, its pods and the cliques removed",
        lambda: (
            not get_json(cluster, "daemonsets,pods", "-n", rack.DRIVER_NAMESPACE, "-l", domain_label)["items"]
            and not get_json(cluster, "computedomaincliques", "-n", rack.DRIVER_NAMESPACE)["items"]
        ),
    )
