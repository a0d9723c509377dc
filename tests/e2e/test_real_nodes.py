"""The driver on real nodes: containerd + runc, the project's image, CDI as the runtime applies it.

A two-node HostManagedIMEX rack on containerd nodes (docs/node-runtime.md): the chart's controller and
kubelet plugin run as real containers from the image tools/image/build.sh builds (the chart's default
reference) and reach the apiserver through the ``kubernetes`` Service; a workload's IMEX channel is
injected by containerd's CDI library. What each container says comes back through ``kubectl logs``
and ``kubectl exec``, as on a real cluster.
"""

from __future__ import annotations

from typing import Any

import imexdra
from imexdra.cli import rack
from imexdra.devices.procfs_fake import DEFAULT_IMEX_CHANNELS_MAJOR
from imexdra.localcluster.cluster import LocalCluster
from tests.e2e.helpers import apply, compute_domain, driver_pods, is_ready, pod_phase, wait_until

IMAGE = f"docker.io/library/imexdra:{imexdra.__version__}"
STAND_IN = "docker.io/library/ubuntu:22.04"
CONTROLLER = "app.kubernetes.io/component=controller"
PLUGIN = "app.kubernetes.io/component=kubelet-plugin"


def test_driver_components_run_from_the_projects_image(real_nodes_rack: LocalCluster) -> None:
    """Controller and one plugin per node: Ready containerd containers of the image, with their logs."""

    def all_ready() -> list[dict[str, Any]]:
        # helm --wait is satisfied with one DaemonSet pod short (maxUnavailable); wait for all.
        pods = driver_pods(real_nodes_rack, CONTROLLER) + driver_pods(real_nodes_rack, PLUGIN)
        return pods if len(pods) == 1 + len(real_nodes_rack.nodes) and all(map(is_ready, pods)) else []

    for pod in wait_until("controller and a plugin per node Ready", all_ready):
        [status] = pod["status"]["containerStatuses"]
        assert status["image"] == IMAGE
        assert status["imageID"].startswith("sha256:")
        assert status["containerID"].startswith("containerd://")
    [controller] = driver_pods(real_nodes_rack, CONTROLLER)
    logs = real_nodes_rack.kubectl("logs", "-n", rack.DRIVER_NAMESPACE, controller["metadata"]["name"]).stdout
    assert '"event":"caches_synced"' in logs


def test_controller_runs_non_root_on_a_read_only_root_filesystem(real_nodes_rack: LocalCluster) -> None:
    """Inside its container the controller is uid 65532 and cannot write to /."""
    [controller] = driver_pods(real_nodes_rack, CONTROLLER)
    script = "id -u; touch /probe 2>&1 || true"
    name = controller["metadata"]["name"]
    result = real_nodes_rack.kubectl("exec", "-n", rack.DRIVER_NAMESPACE, name, "--", "sh", "-c", script)
    uid, touch = result.stdout.splitlines()
    assert uid == "65532"
    assert "Read-only file system" in touch


def worker(name: str, node: str) -> dict[str, Any]:
    """A stand-in workload pod on ``node`` that lists its IMEX channel devices and exits."""
    script = "ls -l /dev/nvidia-caps-imex-channels; stat -c '%n %F %t:%T' /dev/nvidia-caps-imex-channels/*"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team"},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": node},
            "resourceClaims": [{"name": "channel", "resourceClaimTemplateName": "train-channel"}],
            "containers": [
                {
                    "name": "main",
                    "image": STAND_IN,
                    "command": ["sh", "-c", script],
                    "resources": {"claims": [{"name": "channel"}]},
                }
            ],
        },
    }


def test_workload_gets_its_channel_as_a_real_char_device(real_nodes_rack: LocalCluster) -> None:
    """A worker per node: containerd's CDI creates channel0, a char device of the channel major."""
    real_nodes_rack.create_namespace("team")
    apply(real_nodes_rack, compute_domain("train", "team", "train-channel"))
    wait_until(
        "the channel claim template",
        lambda: (
            real_nodes_rack.kubectl(
                "get", "resourceclaimtemplate/train-channel", "-n=team", check=False
            ).returncode
            == 0
        ),
    )
    names = {node.name: f"worker-{node.name}" for node in real_nodes_rack.nodes}
    apply(real_nodes_rack, *(worker(name, node) for node, name in names.items()))
    major = f"{DEFAULT_IMEX_CHANNELS_MAJOR:x}"
    finished = ("Succeeded", "Failed")
    for name in names.values():
        wait_until(f"{name} finished", lambda n=name: pod_phase(real_nodes_rack, "team", n) in finished)
        assert pod_phase(real_nodes_rack, "team", name) == "Succeeded"
        logs = real_nodes_rack.kubectl("logs", name, "-n", "team").stdout.splitlines()
        assert f"/dev/nvidia-caps-imex-channels/channel0 character special file {major}:0" in logs
        assert logs[1].startswith("crw")
