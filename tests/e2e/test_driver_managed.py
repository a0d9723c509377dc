"""Driver-managed IMEX end to end on a simulated rack: the seed flow with real daemon pods.

The controller's per-domain DaemonSet runs ``compute-domain-daemon`` on both nodes as host processes;
the workers' channels are prepared only once their node's daemon is ready. Each daemon runs the node's
(fake) nvidia-imex from its driver root, which reaches the container only as a mount of the base CDI
spec, as on a real node: the image has none, the test host has none at ``/usr/bin``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from imexdra.api.constants import COMPUTE_DOMAIN_LABEL_KEY, DRIVER_NAME
from imexdra_sim import demo, rack
from imexdra_sim.builders import compute_domain
from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.rack import upgrade_chart
from tests.e2e.helpers import (
    PLUGIN_SELECTOR,
    channel_pod,
    container_log,
    domain_status,
    driver_pods,
    fresh_namespace,
    imex_domain_view,
    injected_channel_devices,
    log_events,
    pod_phase,
    run_seed_job,
    without_imex,
)
from tests.support.kubectl import apply, get_json
from tests.support.kubeversion import check_selected_kubernetes
from tests.support.upstream import upstream_values
from tests.support.waiting import wait_until

BASE_SPEC = "k8s.compute-domain.nvidia.com-device_base.yaml"
DAEMON_SELECTOR = COMPUTE_DOMAIN_LABEL_KEY  # every domain's daemon pods carry the label


def container_pid(cluster: LocalCluster, pod: dict[str, Any]) -> int:
    """The host PID of the pod's (only, latest) container, from its node's runtime record."""
    node = cluster.node(pod["spec"]["nodeName"])
    created = [r for r in node.cri_records("CreateContainer") if r["pod_uid"] == pod["metadata"]["uid"]]
    started = {r["container_id"]: r["pid"] for r in node.cri_records("StartContainer")}
    return int(started[created[-1]["container_id"]])


def imex_seen_by_daemon(cluster: LocalCluster, pod: dict[str, Any]) -> bool:
    """Whether the daemon container's /usr/bin/nvidia-imex is its node's driver-root file (the CDI mount)."""
    root = Path(f"/proc/{container_pid(cluster, pod)}/root")  # the path as the container resolves it
    node_file = cluster.node(pod["spec"]["nodeName"]).host_dir / "sim/driver-root/usr/bin/nvidia-imex"
    return all(
        (root / "usr/bin" / name).samefile(node_file.with_name(name))
        for name in ("nvidia-imex", "nvidia-imex-ctl")
    )


def test_the_rack_runs_the_selected_kubernetes(
    driver_managed_rack: LocalCluster, record_testsuite_property: Callable[[str, object], None]
) -> None:
    """The apiserver and every kubelet are the Kubernetes the harness selected (IMEXDRA_KUBE_VERSION)."""
    check_selected_kubernetes(driver_managed_rack, record_testsuite_property)


def test_the_install_took_upstreams_values_file(driver_managed_rack: LocalCluster) -> None:
    """The rack was installed with upstream's whole default values file under its own values (issue 19):
    every key of it reached Helm, and the seed flow below runs on that install."""
    assert driver_managed_rack.binaries is not None
    supplied = json.loads(
        driver_managed_rack.run(
            str(driver_managed_rack.binaries.path("helm")),
            "get",
            "values",
            rack.RELEASE,
            f"--kubeconfig={driver_managed_rack.kubeconfig}",
            f"--namespace={rack.DRIVER_NAMESPACE}",
            "--output=json",
        ).stdout
    )
    upstream = upstream_values()
    assert set(upstream) <= set(supplied)
    assert supplied["consumableShares"] == upstream["consumableShares"]
    assert supplied["kubeletPlugin"]["containers"].keys() >= upstream["kubeletPlugin"]["containers"].keys()


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
    assert not Path("/usr/bin/nvidia-imex").exists()  # nothing on the host's PATH to fall back on
    for pod in daemon_pods["items"]:
        assert imex_seen_by_daemon(cluster, pod), pod["metadata"]["name"]
        [found] = [
            e for e in log_events(container_log(cluster, pod)) if e.get("msg") == "IMEX binaries found"
        ]
        assert (found["nvidia_imex"], found["nvidia_imex_ctl"]) == (
            "/usr/bin/nvidia-imex",
            "/usr/bin/nvidia-imex-ctl",
        )

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


@pytest.fixture
def namespace(driver_managed_rack: LocalCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace per test, emptied afterwards."""
    yield from fresh_namespace(driver_managed_rack, request)


@pytest.fixture
def node_without_imex(driver_managed_rack: LocalCluster) -> Iterator[str]:
    """gb200-01's driver install without nvidia-imex/nvidia-imex-ctl (its plugin restarted to see it).

    Afterwards the programs are back and the plugin restarted again, so the rack is whole.
    """
    yield from without_imex(driver_managed_rack, "gb200-01")


def test_a_driver_root_without_imex_fails_the_daemon_saying_why(
    driver_managed_rack: LocalCluster, node_without_imex: str, namespace: str
) -> None:
    """No nvidia-imex in the driver root: no CDI mount, the plugin warns, the daemon exits saying why."""
    cluster = driver_managed_rack
    plugin = next(
        p for p in driver_pods(cluster, PLUGIN_SELECTOR) if p["spec"]["nodeName"] == node_without_imex
    )
    warnings = [e for e in log_events(container_log(cluster, plugin)) if e.get("severity") == "warning"]
    assert any("IMEX daemons on this node cannot start" in e["msg"] for e in warnings)
    base = yaml.safe_load(
        (cluster.node(node_without_imex).host_dir / rack.CDI_ROOT.lstrip("/") / BASE_SPEC).read_text()
    )
    assert "mounts" not in base.get("containerEdits", {})

    apply(cluster, compute_domain("no-imex", namespace, "no-imex-channel"))
    apply(cluster, channel_pod("worker", namespace, "no-imex-channel", node=node_without_imex))

    def failed_daemon_log() -> list[str] | None:
        pods = get_json(cluster, "pods", "-n", rack.DRIVER_NAMESPACE, "-l", DAEMON_SELECTOR)["items"]
        for pod in pods:
            if pod["spec"].get("nodeName") != node_without_imex:
                continue
            terminated = [
                s for s in pod["status"].get("containerStatuses", []) if s["lastState"].get("terminated")
            ]
            if terminated:
                return [
                    e["error"]
                    for e in log_events(container_log(cluster, pod))
                    if e.get("msg") == "Daemon failed"
                ]
        return None

    [error] = wait_until("the daemon on the node without IMEX exited", failed_daemon_log)
    assert error.startswith("nvidia-imex and nvidia-imex-ctl not found in this container")
    assert "NVIDIA driver install must provide them" in error and "nvidiaDriverRoot" in error
    assert get_json(cluster, "pod", "worker", "-n", namespace)["status"].get("phase") == "Pending"


# -- in-use protection (docs/in-use-protection.md) -------------------------------------------------


def in_use_events(cluster: LocalCluster, namespace: str, uid: str) -> list[dict[str, Any]]:
    """The domain's ``InUse`` Warning events."""
    events = get_json(cluster, "events", "-n", namespace)["items"]
    return [e for e in events if e["involvedObject"].get("uid") == uid and e["reason"] == "InUse"]


def domain_objects(cluster: LocalCluster, uid: str) -> dict[str, list[str]]:
    """Names of the domain's labelled objects that are not terminating, by kind (daemon side + template)."""
    found = {}
    for kind in ("resourceclaimtemplates", "daemonsets", "pods", "nodes"):
        items = get_json(cluster, kind, "-A", "-l", f"{DAEMON_SELECTOR}={uid}")["items"]
        found[kind] = sorted(
            i["metadata"]["name"] for i in items if not i["metadata"].get("deletionTimestamp")
        )
    return found


def running_domain_pod(cluster: LocalCluster, namespace: str, domain: str) -> str:
    """Create ``domain`` and a pod on gb200-00 using its channel; wait until it runs; the domain's UID."""
    apply(cluster, compute_domain(domain, namespace, f"{domain}-channel"))
    apply(cluster, channel_pod("worker", namespace, f"{domain}-channel", node="gb200-00"))
    wait_until(
        "the worker Running", lambda: pod_phase(cluster, namespace, "worker") == "Running", timeout=240
    )
    uid: str = get_json(cluster, "computedomain", domain, "-n", namespace)["metadata"]["uid"]
    return uid


def test_a_domain_in_use_is_kept_until_its_pod_is_gone(
    driver_managed_rack: LocalCluster, namespace: str
) -> None:
    """Deleted under a running pod: Terminating, InUse; template, daemons, labels kept; pod gone: all gone."""
    cluster = driver_managed_rack
    uid = running_domain_pod(cluster, namespace, "held")
    before = domain_objects(cluster, uid)
    assert before["resourceclaimtemplates"] and before["daemonsets"] and before["pods"] and before["nodes"]

    cluster.kubectl("delete", "computedomain", "held", "-n", namespace, "--wait=false")
    [event] = wait_until("the InUse event", lambda: in_use_events(cluster, namespace, uid))
    assert event["type"] == "Warning" and f"{namespace}/worker" in event["message"]
    assert get_json(cluster, "computedomain", "held", "-n", namespace)["metadata"]["deletionTimestamp"]
    assert domain_objects(cluster, uid) == before  # nothing torn down, no daemon restarted or replaced
    assert pod_phase(cluster, namespace, "worker") == "Running"

    cluster.kubectl("delete", "pod", "worker", "-n", namespace, "--wait=false")
    wait_until("the domain gone", lambda: not domain_exists(cluster, namespace, "held"), timeout=180)
    wait_until("its objects removed", lambda: not any(domain_objects(cluster, uid).values()), timeout=120)


def domain_exists(cluster: LocalCluster, namespace: str, name: str) -> bool:
    """Whether the API still has the ComputeDomain (terminating included)."""
    found = cluster.kubectl("get", "computedomain", name, "-n", namespace, "--ignore-not-found", "-o", "name")
    return bool(found.stdout.strip())


@pytest.fixture
def protection_off(driver_managed_rack: LocalCluster) -> Iterator[None]:
    """The install with ``inUseProtection=false`` (the controller restarted); switched back afterwards."""
    upgrade_chart(driver_managed_rack, {"resources": {"computeDomains": {"inUseProtection": False}}})
    yield
    upgrade_chart(driver_managed_rack, {"resources": {"computeDomains": {"inUseProtection": True}}})


def test_the_opt_out_tears_down_under_a_running_pod(
    driver_managed_rack: LocalCluster, protection_off: None, namespace: str
) -> None:
    """inUseProtection=false: upstream's teardown, at once, while the pod still runs."""
    cluster = driver_managed_rack
    controller = get_json(
        cluster, "deployments", "-n", rack.DRIVER_NAMESPACE, "-l", "app.kubernetes.io/component=controller"
    )
    [env] = [c["env"] for c in controller["items"][0]["spec"]["template"]["spec"]["containers"]]
    assert {"name": "COMPUTE_DOMAIN_IN_USE_PROTECTION", "value": "false"} in env
    uid = running_domain_pod(cluster, namespace, "unheld")
    cluster.kubectl("delete", "computedomain", "unheld", "-n", namespace, "--wait=true", timeout=120)
    assert not any(domain_objects(cluster, uid).values())
    assert pod_phase(cluster, namespace, "worker") == "Running"
    assert in_use_events(cluster, namespace, uid) == []


# -- IP mode (upstream's IMEXDaemonsWithDNSNames=false) ---------------------------------------------

IP_MODE_GATES = {"IMEXDaemonsWithDNSNames": False, "ComputeDomainCliques": False}


@pytest.fixture
def ip_mode(driver_managed_rack: LocalCluster) -> Iterator[None]:
    """The install with IMEX daemons addressed by pod IP (cliques off: they need DNS names); restored."""
    upgrade_chart(driver_managed_rack, {"featureGates": IP_MODE_GATES})
    yield
    upgrade_chart(driver_managed_rack, {"featureGates": {name: True for name in IP_MODE_GATES}})


def test_ip_mode_daemons_list_each_other_by_pod_ip(
    driver_managed_rack: LocalCluster, ip_mode: None, namespace: str
) -> None:
    """IMEXDaemonsWithDNSNames=false: each daemon's nodes.cfg lists both daemons' pod IPs, their IMEX
    connects them, the domain's status lists the nodes (no cliques), and both workers run."""
    cluster = driver_managed_rack
    apply(cluster, compute_domain("by-ip", namespace, "by-ip-channel"))
    workers = [f"worker-{node}" for node in ("gb200-00", "gb200-01")]
    for name, node in zip(workers, ("gb200-00", "gb200-01"), strict=True):
        apply(cluster, channel_pod(name, namespace, "by-ip-channel", node=node))
    for name in workers:
        wait_until(
            f"{name} Running", lambda name=name: pod_phase(cluster, namespace, name) == "Running", timeout=240
        )
    uid = get_json(cluster, "computedomain", "by-ip", "-n", namespace)["metadata"]["uid"]
    daemons = get_json(cluster, "pods", "-n", rack.DRIVER_NAMESPACE, "-l", f"{DAEMON_SELECTOR}={uid}")[
        "items"
    ]
    ips = {p["spec"]["nodeName"]: p["status"]["podIP"] for p in daemons}
    assert set(ips) == {"gb200-00", "gb200-01"}
    for node in ips:
        listed = (cluster.node(node).plugins_dir / DRIVER_NAME / "domains" / uid / "nodes.cfg").read_text()
        assert sorted(listed.split()) == sorted(ips.values()), node
    view = wait_until("IMEX connected by IP", lambda: imex_domain_view(cluster, "gb200-00", uid))
    assert {n["ip"] for n in view["nodes"].values()} == set(ips.values())
    status = domain_status(cluster, namespace, "by-ip")
    assert {n["name"]: n["ipAddress"] for n in status.get("nodes", [])} == ips
    assert get_json(cluster, "computedomaincliques", "-A")["items"] == []
