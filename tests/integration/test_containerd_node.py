"""A node with a real container runtime: containerd 2.x and runc under a real kubelet (docs/node-runtime.md).

A cluster of its own with one containerd node (``cd-0``). Pods run as real containers from images the
project builds (tools/image/build.sh), get an address on the node's bridge, and their logs come back
through the kubelet. The kubelet plugin runs beside the kubelet (a host process, as in the other
plugin tests) and writes its CDI specs into the node's ``/var/run/cdi``; containerd's own CDI library
then injects the IMEX channel into the workload container — a real character device read back from
``kubectl logs``.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import uuid
from collections.abc import Iterator

import pytest

from imexdra_sim.builders import channel_template, compute_domain
from imexdra_sim.devices.procfs_fake import DEFAULT_IMEX_CHANNELS_MAJOR
from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.localcluster.nodes import GPU_NODE_LABELS, NodeSpec
from tests.integration.pluginharness import (
    CLIQUE,
    HostImex,
    PluginProcess,
    SimulatedNode,
    install_api,
    plugin_kubeconfig,
    pod_field,
)
from tests.support.builders import channel_pod
from tests.support.kubectl import apply, uid_of
from tests.support.waiting import eventually

NODE, OTHER_NODE = "cd-0", "cd-1"
STAND_IN = "docker.io/library/ubuntu:22.04"
CDI_DIR = "/var/run/cdi"


@pytest.fixture(scope="module")
def cd_cluster() -> Iterator[LocalCluster]:
    """A control plane and two GB200 nodes on containerd + runc, joined by the cluster's fabric."""
    specs = [NodeSpec(name=n, labels=dict(GPU_NODE_LABELS), runtime="containerd") for n in (NODE, OTHER_NODE)]
    with LocalCluster(nodes_specs=specs, cdi_dirs=(CDI_DIR,)) as cluster:
        yield cluster


@pytest.fixture
def namespace(cd_cluster: LocalCluster) -> Iterator[str]:
    """A fresh namespace whose default ServiceAccount exists (pods are refused before it does)."""
    name = f"cd-{uuid.uuid4().hex[:6]}"
    cd_cluster.create_namespace(name)
    yield name
    cd_cluster.kubectl("delete", "namespace", name, "--wait=false")


async def finished(cluster: LocalCluster, namespace: str, pod: str) -> str:
    """Wait until ``pod`` has run to completion; return its phase."""
    return await eventually(
        f"pod {pod} finished",
        lambda: (
            phase
            if (phase := pod_field(cluster, namespace, pod, "{.status.phase}")) in ("Succeeded", "Failed")
            else ""
        ),
        within=90,
    )


def script_pod(namespace: str, name: str, script: str, node: str = NODE) -> dict[str, object]:
    """A one-shot pod of the stand-in image on ``node`` running ``script`` under its shell."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "nodeSelector": {"kubernetes.io/hostname": node},
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": STAND_IN, "command": ["sh", "-c", script]}],
        },
    }


async def test_pod_runs_in_a_real_container_and_its_logs_come_back(
    cd_cluster: LocalCluster, namespace: str
) -> None:
    """PID 1 in its own namespace, the stand-in's root filesystem, an address from the node's pod CIDR."""
    # Kubernetes expands $(VAR) in commands and turns "$$" into "$": "$$$$" reaches the shell as "$$".
    script = "echo pid=$$$$; head -n 1 /etc/imexdra-stand-in; ip -4 -o addr show eth0"
    apply(cd_cluster, script_pod(namespace, "hello", script))
    assert await finished(cd_cluster, namespace, "hello") == "Succeeded"
    logs = cd_cluster.kubectl("logs", "hello", "-n", namespace).stdout
    assert "pid=1\n" in logs
    assert "This is not Ubuntu (docker.io/library/ubuntu:22.04). It is imexdra's stand-in" in logs
    pod_ip = pod_field(cd_cluster, namespace, "hello", "{.status.podIP}")
    assert ipaddress.ip_address(pod_ip) in ipaddress.ip_network(cd_cluster.node(NODE).pod_cidr)
    assert f"inet {pod_ip}/24" in logs


async def test_pods_on_different_nodes_reach_each_other(cd_cluster: LocalCluster, namespace: str) -> None:
    """A pod on cd-1 fetches a page a pod on cd-0 serves, by pod IP, across the fabric."""
    serve = "mkdir -p /www && echo served-by-$(hostname) > /www/index.html && exec httpd -f -p 8080 -h /www"
    server = script_pod(namespace, "server", serve)
    server["spec"]["restartPolicy"] = "Always"  # type: ignore[index]
    apply(cd_cluster, server)
    server_ip = await eventually(
        "server pod Running with an IP",
        lambda: (
            pod_field(cd_cluster, namespace, "server", "{.status.podIP}")
            if pod_field(cd_cluster, namespace, "server", "{.status.phase}") == "Running"
            else ""
        ),
    )
    assert ipaddress.ip_address(server_ip) in ipaddress.ip_network(cd_cluster.node(NODE).pod_cidr)
    # busybox-static's wget crashes in this image (static glibc); nc speaks the HTTP/1.0 itself.
    request = rf"printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 2 {server_ip} 8080"
    fetch = f"for i in $(seq 50); do {request} | tail -n 1 | grep . && exit 0; sleep 0.2; done; exit 1"
    apply(cd_cluster, script_pod(namespace, "client", fetch, node=OTHER_NODE))
    assert await finished(cd_cluster, namespace, "client") == "Succeeded"
    assert cd_cluster.kubectl("logs", "client", "-n", namespace).stdout == "served-by-server\n"


async def test_pods_reach_the_apiserver_through_the_kubernetes_service(
    cd_cluster: LocalCluster, namespace: str
) -> None:
    """kube-proxy on the node turns the Service address (what in-cluster clients use) into the apiserver."""
    script = (
        'echo "service=$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT"; '
        "for i in $(seq 50); do nc -w 2 $KUBERNETES_SERVICE_HOST $KUBERNETES_SERVICE_PORT </dev/null && "
        "echo connected && exit 0; sleep 0.2; done; exit 1"
    )
    apply(cd_cluster, script_pod(namespace, "api-client", script, node=OTHER_NODE))
    assert await finished(cd_cluster, namespace, "api-client") == "Succeeded"
    assert (
        cd_cluster.kubectl("logs", "api-client", "-n", namespace).stdout
        == "service=10.0.0.1:443\nconnected\n"
    )


async def test_pods_resolve_services_by_name_through_cluster_dns(
    cd_cluster: LocalCluster, namespace: str
) -> None:
    """CoreDNS on the control-plane node answers a pod's lookup of a Service by its short and full name."""
    apply(
        cd_cluster,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "peers", "namespace": namespace},
            "spec": {"clusterIP": "None", "selector": {"app": "none"}, "ports": [{"port": 1}]},
        },
    )
    apply(
        cd_cluster,
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "front", "namespace": namespace},
            "spec": {"selector": {"app": "none"}, "ports": [{"port": 80}]},
        },
    )
    front_ip = cd_cluster.kubectl(
        "get", "service", "front", "-n", namespace, "-o", "jsonpath={.spec.clusterIP}"
    ).stdout
    script = (
        "grep -E '^(nameserver|search)' /etc/resolv.conf; "
        "nslookup front; nslookup kubernetes.default.svc.cluster.local"
    )
    apply(cd_cluster, script_pod(namespace, "resolver", script, node=OTHER_NODE))
    assert await finished(cd_cluster, namespace, "resolver") == "Succeeded"
    logs = cd_cluster.kubectl("logs", "resolver", "-n", namespace).stdout
    assert "nameserver 10.0.0.10" in logs
    assert f"search {namespace}.svc.cluster.local svc.cluster.local cluster.local" in logs
    assert f"Name:\tfront.{namespace}.svc.cluster.local\nAddress: {front_ip}" in logs
    assert "Name:\tkubernetes.default.svc.cluster.local\nAddress: 10.0.0.1" in logs
    events = cd_cluster.kubectl("get", "events", "-n", namespace, "-o", "jsonpath={.items[*].reason}").stdout
    assert "MissingClusterDNS" not in events


def test_control_plane_node_is_cpu_only_tainted_and_runs_cluster_dns(cd_cluster: LocalCluster) -> None:
    """As in a kubeadm or kind cluster: the role label, the NoSchedule taint, CoreDNS on it, no GPUs."""
    assert cd_cluster.control_plane is not None
    name = cd_cluster.control_plane.name
    node = json.loads(cd_cluster.kubectl("get", "node", name, "-o", "json").stdout)
    assert "node-role.kubernetes.io/control-plane" in node["metadata"]["labels"]
    assert "nvidia.com/gpu.present" not in node["metadata"]["labels"]
    assert {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"} in node["spec"]["taints"]
    dns_nodes = cd_cluster.kubectl(
        "get",
        "pods",
        "-n",
        "kube-system",
        "-l",
        "k8s-app=kube-dns",
        "-o",
        "jsonpath={.items[*].spec.nodeName}",
    ).stdout
    assert dns_nodes == name
    assert name not in [n.name for n in cd_cluster.nodes]


@pytest.fixture(scope="module")
def plugin(cd_cluster: LocalCluster) -> Iterator[PluginProcess]:
    """A host-managed plugin on cd-0 writing its CDI specs where the node's containerd reads them.

    The node's host nvidia-imex runs, so the plugin's readiness check passes.
    """
    install_api(cd_cluster)
    node = cd_cluster.node(NODE)
    cdi_root = node.host_dir / CDI_DIR.lstrip("/")
    process = PluginProcess(
        SimulatedNode(node, CLIQUE),
        plugin_kubeconfig(cd_cluster, node, host_managed=True),
        host_managed=True,
        extra_env={"CDI_ROOT": str(cdi_root)},
    )
    host_imex = HostImex(process.sim)
    host_imex.start()
    process.start()
    yield process
    if process.process is not None:
        process.stop()
    host_imex.stop()


async def test_channel_claim_is_a_real_char_device_injected_by_containerd_cdi(
    cd_cluster: LocalCluster, plugin: PluginProcess, namespace: str
) -> None:
    """containerd's CDI library creates /dev/nvidia-caps-imex-channels/channel0 with the channel major."""
    await plugin.wait_registered()
    apply(cd_cluster, compute_domain("train", namespace))
    domain_uid = uid_of(cd_cluster, "computedomain", "train", namespace)
    apply(cd_cluster, channel_template(namespace, "train-channel", domain_uid, "Single"))
    pod = channel_pod("worker", namespace, "train-channel", node=NODE)
    container = pod["spec"]["containers"][0]
    container["image"] = STAND_IN
    container["command"] = [
        "sh",
        "-c",
        "ls -l /dev/nvidia-caps-imex-channels; stat -c '%n %F %t:%T' /dev/nvidia-caps-imex-channels/*",
    ]
    pod["spec"]["restartPolicy"] = "Never"
    apply(cd_cluster, pod)
    assert await finished(cd_cluster, namespace, "worker") == "Succeeded"
    logs = cd_cluster.kubectl("logs", "worker", "-n", namespace).stdout
    major = f"{DEFAULT_IMEX_CHANNELS_MAJOR:x}"
    assert f"/dev/nvidia-caps-imex-channels/channel0 character special file {major}:0" in logs.splitlines()
    assert logs.startswith("total 0\ncrw")


def _container_ids(cluster: LocalCluster, namespace: str, pod: str) -> set[str]:
    """The runtime IDs of ``pod``'s containers (``containerd://<id>`` in its status)."""
    ids = pod_field(cluster, namespace, pod, "{.status.containerStatuses[*].containerID}")
    return {entry.removeprefix("containerd://") for entry in ids.split()}


def _cgroups_seen_by(cluster: LocalCluster, node: str) -> set[str]:
    """The container cgroups under ``/sys/fs/cgroup/cpu/k8s.io`` as the node's own processes see them."""
    runtime = cluster.node(node).processes[0].popen.pid
    listing = subprocess.run(
        ["nsenter", f"--mount=/proc/{runtime}/ns/mnt", "--", "ls", "/sys/fs/cgroup/cpu/k8s.io"],
        capture_output=True,
        text=True,
        check=True,
    )
    return set(listing.stdout.split())


async def test_each_node_sees_only_its_own_cgroups(cd_cluster: LocalCluster, namespace: str) -> None:
    """A node's cgroup hierarchies are its own subtree of the machine's (docs/node-runtime.md §9).

    Its cAdvisor then watches its own containers only, not every node's on the machine.
    """
    placement = {"here": NODE, "there": OTHER_NODE}
    for pod, node in placement.items():
        apply(cd_cluster, script_pod(namespace, pod, "exec sleep 600", node=node))
    await eventually(
        "both pods Running",
        lambda: all(pod_field(cd_cluster, namespace, p, "{.status.phase}") == "Running" for p in placement),
    )
    here, there = (_container_ids(cd_cluster, namespace, pod) for pod in placement)
    seen_here, seen_there = (_cgroups_seen_by(cd_cluster, node) for node in placement.values())
    assert here <= seen_here and not here & seen_there
    assert there <= seen_there and not there & seen_here
    cgroup = cd_cluster.node(NODE).cgroup
    assert cgroup is not None
    [own] = [path for path in cgroup.paths() if path.parts[:5] == ("/", "sys", "fs", "cgroup", "cpu")]
    assert here <= {path.name for path in (own / "k8s.io").iterdir() if path.is_dir()}
