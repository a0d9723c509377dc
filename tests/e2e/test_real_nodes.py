"""The driver on real nodes: containerd + runc, the project's image, CDI as the runtime applies it.

A two-node driver-managed rack on containerd nodes (docs/node-runtime.md), installed as an operator
installs (docs/registry.md): tools/release.py pushes the image index tools/image/build.sh built and the
chart to the cluster's registry, ``helm install`` takes the OCI chart, and every node's containerd
pulls the image by digest over TLS (it was not imported). The chart's controller and kubelet plugin
run as real containers from that image and reach the apiserver through the ``kubernetes`` Service;
the controller's IMEX daemons run from the same image and find ``nvidia-imex`` only where a real node
has it, bind-mounted by the base CDI spec from the node's driver root; a workload's IMEX channel is
injected by containerd's CDI library. What each container says comes back through ``kubectl logs``
and ``kubectl exec``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import imexdra
from imexdra_sim import rack
from imexdra_sim.builders import compute_domain
from imexdra_sim.devices.procfs_fake import DEFAULT_IMEX_CHANNELS_MAJOR
from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.rack import upgrade_chart
from tests.e2e.helpers import (
    COMPUTE_DOMAIN_LABEL,
    CONTROLLER_SELECTOR,
    PLUGIN_SELECTOR,
    driver_pods,
    is_ready,
    plugin_on,
    pod_phase,
    ready_plugin_on,
    without_imex,
)
from tests.support.builders import channel_pod
from tests.support.kubectl import apply, get_json
from tests.support.waiting import wait_until

IMAGE = f"docker.io/library/imexdra:{imexdra.__version__}"
STAND_IN = "docker.io/library/ubuntu:22.04"
CONTROLLER, PLUGIN, DAEMON = CONTROLLER_SELECTOR, PLUGIN_SELECTOR, COMPUTE_DOMAIN_LABEL


def test_driver_components_run_from_the_projects_image(real_nodes_rack: LocalCluster) -> None:
    """Controller and one plugin per node: Ready containers of the released image, pulled by digest."""
    release = rack.published_release(real_nodes_rack)
    reference, _, digest = release["image"].partition("@")
    repository, _, tag = reference.rpartition(":")
    assert real_nodes_rack.image_registry is not None
    assert (repository, tag) == (f"{real_nodes_rack.image_registry.host}/imexdra", imexdra.__version__)

    def all_ready() -> list[dict[str, Any]]:
        # helm --wait is satisfied with one DaemonSet pod short (maxUnavailable); wait for all.
        pods = driver_pods(real_nodes_rack, CONTROLLER) + driver_pods(real_nodes_rack, PLUGIN)
        return pods if len(pods) == 1 + len(real_nodes_rack.nodes) and all(map(is_ready, pods)) else []

    for pod in wait_until("controller and a plugin per node Ready", all_ready):
        [container] = pod["spec"]["containers"]
        assert container["image"] == release["image"]  # the chart from the registry names it
        [status] = pod["status"]["containerStatuses"]
        assert status["imageID"] == f"{repository}@{digest}"  # the index, as the node pulled it
        assert status["containerID"].startswith("containerd://")
    for node in real_nodes_rack.nodes:
        assert pulled_image(real_nodes_rack, node.name, release["image"])
        assert IMAGE not in node_images(real_nodes_rack, node.name), "the seed holds the project's image"
    [controller] = driver_pods(real_nodes_rack, CONTROLLER)
    logs = real_nodes_rack.kubectl("logs", "-n", rack.DRIVER_NAMESPACE, controller["metadata"]["name"]).stdout
    assert '] "Informer caches synced"' in logs  # klog's text layout: header, then the quoted message


def pulled_image(cluster: LocalCluster, node: str, image: str) -> bool:
    """Whether the kubelet of ``node`` says it pulled ``image`` (its ``Pulled`` event)."""
    events = get_json(cluster, "events", "-n", rack.DRIVER_NAMESPACE, "--field-selector=reason=Pulled")
    return any(
        e.get("source", {}).get("host") == node or e.get("reportingInstance") == node
        for e in events["items"]
        if f'Successfully pulled image "{image}"' in e["message"]
    )


def node_images(cluster: LocalCluster, node: str) -> list[str]:
    """The image names the containerd of ``node`` holds in the CRI's namespace."""
    assert cluster.binaries is not None
    ctr = [str(cluster.binaries.path("ctr")), f"--address={cluster.node(node).cri_socket}", "-n", "k8s.io"]
    return cluster.run(*ctr, "images", "list", "--quiet").stdout.split()


def test_controller_runs_non_root_on_a_read_only_root_filesystem(real_nodes_rack: LocalCluster) -> None:
    """Inside its container the controller is uid 65532 and cannot write to /."""
    [controller] = driver_pods(real_nodes_rack, CONTROLLER)
    script = "id -u; touch /probe 2>&1 || true"
    name = controller["metadata"]["name"]
    result = real_nodes_rack.kubectl("exec", "-n", rack.DRIVER_NAMESPACE, name, "--", "sh", "-c", script)
    uid, touch = result.stdout.splitlines()
    assert uid == "65532"
    assert "Read-only file system" in touch


def template_exists(cluster: LocalCluster, namespace: str, name: str) -> bool:
    """Whether the controller has made the ResourceClaimTemplate ``namespace/name``."""
    result = cluster.kubectl("get", f"resourceclaimtemplate/{name}", "-n", namespace, check=False)
    return result.returncode == 0


def worker(name: str, node: str) -> dict[str, Any]:
    """A stand-in workload pod on ``node`` that lists its IMEX channel devices, then stays."""
    script = (
        "ls -l /dev/nvidia-caps-imex-channels; stat -c '%n %F %t:%T' /dev/nvidia-caps-imex-channels/*; "
        "exec sleep 3600"
    )
    return channel_pod(name, "team", "train-channel", node=node, image=STAND_IN, command=["sh", "-c", script])


@pytest.fixture(scope="module")
def workers(real_nodes_rack: LocalCluster) -> dict[str, str]:
    """A two-node ComputeDomain ``team/train`` and a running worker on each node (node -> pod)."""
    real_nodes_rack.create_namespace("team")
    domain = compute_domain("train", "team", "train-channel")
    domain["spec"]["numNodes"] = len(real_nodes_rack.nodes)
    apply(real_nodes_rack, domain)
    wait_until(
        "the channel claim template", lambda: template_exists(real_nodes_rack, "team", "train-channel")
    )
    names = {node.name: f"worker-{node.name}" for node in real_nodes_rack.nodes}
    apply(real_nodes_rack, *(worker(name, node) for node, name in names.items()))
    for name in names.values():
        wait_until(f"{name} Running", lambda n=name: pod_phase(real_nodes_rack, "team", n) == "Running")
    return names


def test_workload_gets_its_channel_as_a_real_char_device(
    real_nodes_rack: LocalCluster, workers: dict[str, str]
) -> None:
    """A worker per node: containerd's CDI created channel0, a char device of the channel major."""
    major = f"{DEFAULT_IMEX_CHANNELS_MAJOR:x}"
    expected = f"/dev/nvidia-caps-imex-channels/channel0 character special file {major}:0"

    def listing(pod: str) -> list[str]:
        lines = real_nodes_rack.kubectl("logs", pod, "-n", "team").stdout.splitlines()
        return lines if expected in lines else []

    for name in workers.values():
        logs = wait_until(f"{name}'s device listing", lambda n=name: listing(n))
        assert logs[1].startswith("crw"), logs


def test_daemons_run_nvidia_imex_from_their_nodes_driver_root(
    real_nodes_rack: LocalCluster, workers: dict[str, str]
) -> None:
    """In each daemon container /usr/bin/nvidia-imex is the CDI bind mount of its node's driver-root file."""

    script = "grep ' /usr/bin/nvidia-imex ' /proc/self/mountinfo; nvidia-imex-ctl -q -c /imexd/imexd.cfg"
    for pod in ready_daemons(real_nodes_rack, len(workers)):
        node, name = pod["spec"]["nodeName"], pod["metadata"]["name"]
        exec_ = ("exec", "-n", rack.DRIVER_NAMESPACE, name, "--", "sh", "-c", script)
        mount, ready = real_nodes_rack.kubectl(*exec_).stdout.splitlines()
        source = f"/{node}/host/sim/driver-root/usr/bin/nvidia-imex"
        assert mount.split()[3].endswith(source), mount  # the mount's root: the node's driver-root file
        assert " ro," in f" {mount.split()[5]},", mount
        assert ready == "READY"


def test_daemons_run_as_root_with_no_capability_and_write_their_files(
    real_nodes_rack: LocalCluster, workers: dict[str, str]
) -> None:
    """The daemon container's securityContext holds for every process in it, IMEX's too (docs/tenancy.md).

    Root with no capability, no privilege escalation, seccomp filtering: and yet the daemon has
    rewritten the pod's hosts file and written /imexd, all owned by root.
    """
    script = (
        "for p in /proc/[0-9]*; do echo \"cmd=$(tr '\\0' ' ' < $p/cmdline)\"; "
        "grep -E '^(Uid|CapEff|NoNewPrivs|Seccomp):' $p/status; done; "
        "stat -c 'owner=%u %n' /etc/hosts /imexd /imexd/imexd.cfg /imexd/nodes.cfg; "
        "echo slots=$(grep -c '^[^#].*compute-domain-daemon-' /etc/hosts); "
        "echo mappings=$(grep '^[^#].*compute-domain-daemon-' /etc/hosts "
        "| grep -vc '^127[.]0[.]0[.]2[[:space:]]')"
    )
    expected = {"Uid": "0\t0\t0\t0", "CapEff": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2"}
    for pod in ready_daemons(real_nodes_rack, len(workers)):
        name = pod["metadata"]["name"]
        exec_ = ("exec", "-n", rack.DRIVER_NAMESPACE, name, "--", "sh", "-c", script)
        lines = real_nodes_rack.kubectl(*exec_).stdout.splitlines()
        commands = [line.removeprefix("cmd=") for line in lines if line.startswith("cmd=")]
        assert any("nvidia-imex -c /imexd/imexd.cfg" in command for command in commands), commands
        status = [line.split(":", 1) for line in lines if ":" in line and not line.startswith("cmd=")]
        # At least the daemon's and IMEX's (a probe's process may come and go while the loop runs).
        assert len(status) >= 2 * len(expected), lines
        for key, value in status:
            assert value.strip() == expected[key], (commands, key, value)
        owners = [line.removeprefix("owner=").split()[0] for line in lines if line.startswith("owner=")]
        assert owners == ["0"] * 4, lines
        # Every slot of maxNodesPerIMEXDomain (18) is listed, those without a daemon at 127.0.0.2.
        assert "slots=18" in lines, lines
        assert f"mappings={len(workers)}" in lines, lines


def ready_daemons(cluster: LocalCluster, count: int) -> list[dict[str, Any]]:
    """Wait for ``count`` IMEX daemon pods, all Ready."""

    def ready() -> list[dict[str, Any]]:
        pods = driver_pods(cluster, DAEMON)
        return pods if len(pods) == count and all(map(is_ready, pods)) else []

    return wait_until("an IMEX daemon per node, Ready", ready)


def free_node(cluster: LocalCluster, node: str) -> None:
    """Remove the shared workers' domain and wait until ``node`` holds no domain's daemon or label.

    A node serves one ComputeDomain at a time: the workers of the earlier tests go first.
    """
    cluster.kubectl("delete", "namespace", "team", "--ignore-not-found", "--wait=false")

    def node_free() -> bool:
        daemons = [p for p in driver_pods(cluster, DAEMON) if p["spec"].get("nodeName") == node]
        labels = get_json(cluster, "node", node)["metadata"].get("labels", {})
        return not daemons and COMPUTE_DOMAIN_LABEL not in labels

    wait_until(f"{node} free of other domains' daemons", node_free)


def domain_event(cluster: LocalCluster, namespace: str, domain: str, reason: str) -> list[dict[str, Any]]:
    """The Events of ``reason`` on the ComputeDomain ``namespace/domain``."""
    events = get_json(cluster, "events", "-n", namespace, f"--field-selector=reason={reason}")
    return [e for e in events["items"] if e["involvedObject"]["name"] == domain]


def one_node_domain(cluster: LocalCluster, namespace: str, name: str, node: str) -> None:
    """A ComputeDomain ``namespace/name`` of one node and a worker on ``node`` using its channel."""
    cluster.create_namespace(namespace)
    domain = compute_domain(name, namespace, f"{name}-channel")
    domain["spec"]["numNodes"] = 1  # Ready would need this one node's daemon
    apply(cluster, domain)
    wait_until("the claim template", lambda: template_exists(cluster, namespace, f"{name}-channel"))
    pod = worker("worker", node)
    pod["metadata"]["namespace"] = namespace
    pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = f"{name}-channel"
    apply(cluster, pod)


@pytest.fixture
def node_without_imex(real_nodes_rack: LocalCluster) -> Iterator[str]:
    """gb200-01, free of other domains, its driver install without nvidia-imex/nvidia-imex-ctl.

    The programs are back and the plugin restarted afterwards.
    """
    free_node(real_nodes_rack, "gb200-01")
    yield from without_imex(real_nodes_rack, "gb200-01")


def test_a_driver_root_without_imex_makes_the_domain_say_why(
    real_nodes_rack: LocalCluster, node_without_imex: str
) -> None:
    """The daemon container exits with its reason as termination message; the domain's Event repeats it."""
    one_node_domain(real_nodes_rack, "broken", "no-imex", node_without_imex)
    [event] = wait_until(
        "a DaemonFailing Event on the ComputeDomain",
        lambda: domain_event(real_nodes_rack, "broken", "no-imex", "DaemonFailing"),
    )
    assert event["type"] == "Warning"
    message = event["message"]
    assert message.startswith(f"IMEX daemon on node {node_without_imex} keeps failing: ")
    assert "nvidia-imex and nvidia-imex-ctl not found in this container" in message
    assert "nvidiaDriverRoot" in message  # what would work
    status = get_json(real_nodes_rack, "computedomain", "no-imex", "-n", "broken").get("status", {})
    assert status.get("status") == "NotReady"
    assert pod_phase(real_nodes_rack, "broken", "worker") == "Pending"  # waits for its daemon


LEFTOVER_SPEC = "leftover-compute-domain-base.json"


@pytest.fixture
def node_with_a_conflicting_cdi_spec(real_nodes_rack: LocalCluster) -> Iterator[tuple[str, Path]]:
    """gb200-00, free of other domains, with a second CDI spec file defining the base device again.

    As a copy left behind by another install or a hand-run generator would: containerd's CDI library
    refuses a device that two spec files of one directory define. The file goes afterwards.
    """
    node = "gb200-00"
    free_node(real_nodes_rack, node)
    cdi_dir = real_nodes_rack.node(node).host_dir / rack.CDI_ROOT.lstrip("/")
    base = yaml.safe_load((cdi_dir / "k8s.compute-domain.nvidia.com-device_base.yaml").read_text())
    leftover = cdi_dir / LEFTOVER_SPEC
    leftover.write_text(json.dumps(base))
    yield node, leftover
    leftover.unlink(missing_ok=True)


def test_a_cdi_spec_the_runtime_refuses_is_named_by_pod_and_domain_events(
    real_nodes_rack: LocalCluster, node_with_a_conflicting_cdi_spec: tuple[str, Path]
) -> None:
    """containerd's CDI library refuses the daemon's devices; the pod's and the domain's Events say so.

    Once the conflicting file is gone, the kubelet's retry starts the daemon and the worker runs:
    nothing was lost on the way.
    """
    node, leftover = node_with_a_conflicting_cdi_spec
    one_node_domain(real_nodes_rack, "clash", "clash", node)
    refused = "CDI device injection failed: unresolvable CDI devices k8s.compute-domain.nvidia.com/device=all"

    def daemon_refused() -> list[dict[str, Any]]:
        events = get_json(
            real_nodes_rack, "events", "-n", rack.DRIVER_NAMESPACE, "--field-selector=reason=Failed"
        )
        return [e for e in events["items"] if refused in e["message"] and e["source"].get("host") == node]

    [pod_event, *_] = wait_until("the runtime's refusal as the daemon pod's Event", daemon_refused)
    assert pod_event["involvedObject"]["kind"] == "Pod" and pod_event["type"] == "Warning"
    [event] = wait_until(
        "a DaemonFailing Event on the ComputeDomain",
        lambda: domain_event(real_nodes_rack, "clash", "clash", "DaemonFailing"),
    )
    assert event["message"].startswith(f"IMEX daemon on node {node} keeps failing: CreateContainerError: ")
    assert refused in event["message"]
    assert pod_phase(real_nodes_rack, "clash", "worker") == "Pending"

    leftover.unlink()
    wait_until(
        "the worker Running once the conflict is gone",
        lambda: pod_phase(real_nodes_rack, "clash", "worker") == "Running",
    )
    status = get_json(real_nodes_rack, "computedomain", "clash", "-n", "clash").get("status", {})
    assert status.get("status") == "Ready"


@pytest.fixture
def node_with_a_fabric_error(real_nodes_rack: LocalCluster) -> Iterator[str]:
    """gb200-01's NVML reporting a failed NVLink fabric registration on every GPU (the mock's profile).

    Afterwards: the profile restored and the gate back to its default (which restarts the plugins).
    """
    node = "gb200-01"
    profile = real_nodes_rack.node(node).host_dir / "sim/driver-root/usr/lib64/nvml-mock-profile"
    original = profile.read_text()
    profile.write_text(original + "fabric.status=UNKNOWN\n")
    yield node
    profile.write_text(original)
    upgrade_chart(real_nodes_rack, {"featureGates": {"CrashOnNVLinkFabricErrors": True}})
    wait_until(f"the plugin on {node} Ready again", lambda: ready_plugin_on(real_nodes_rack, node))


def test_a_fabric_error_stops_the_plugin_as_crash_on_nvlink_fabric_errors_says(
    real_nodes_rack: LocalCluster, node_with_a_fabric_error: str
) -> None:
    """Gate on (default): the plugin refuses to start and says why; gate off: it starts, with a warning.

    The error comes from the real nvidia-ml-py reading the mock libnvidia-ml.so.1 in the node's driver
    root, inside the plugin's container.
    """
    node = node_with_a_fabric_error
    old = wait_until(f"the plugin on {node}", lambda: plugin_on(real_nodes_rack, node))
    real_nodes_rack.kubectl("delete", "pod", old["metadata"]["name"], "-n", rack.DRIVER_NAMESPACE)

    def refused() -> str:
        pod = plugin_on(real_nodes_rack, node)
        if pod is None or pod["metadata"]["uid"] == old["metadata"]["uid"]:
            return ""
        statuses = pod["status"].get("containerStatuses") or [{}]
        terminated = statuses[0].get("lastState", {}).get("terminated") or {}
        return str(terminated.get("message", ""))

    message = wait_until("the new plugin's termination message", refused)
    assert message.startswith("kubelet plugin failed: NVLink fabric registration error (device 0/GPU-"), (
        message
    )
    assert message.endswith("refusing to start")
    replacement = plugin_on(real_nodes_rack, node)
    assert replacement is not None and not is_ready(replacement)

    upgrade_chart(real_nodes_rack, {"featureGates": {"CrashOnNVLinkFabricErrors": False}})
    pod = wait_until(
        f"the plugin on {node} Ready with the gate off", lambda: ready_plugin_on(real_nodes_rack, node)
    )
    logs = real_nodes_rack.kubectl("logs", "-n", rack.DRIVER_NAMESPACE, pod["metadata"]["name"]).stdout
    assert "NVLink fabric registration error ignored (CrashOnNVLinkFabricErrors=false)" in logs
