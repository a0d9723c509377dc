"""fakecri runs a pod's container as a real host process with the pod's mounts and env."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from imexdra_sim.localcluster.cluster import LocalCluster
from tests.support.hostprocess import HOST_IMAGE, HOST_SRV
from tests.support.kubectl import apply
from tests.support.waiting import eventually

NAMESPACE = "hostproc"

# Asks the apiserver who we are, with nothing but in-cluster config: env, token and CA of the pod.
WHOAMI = (
    "-c '"
    "import json, os, ssl, urllib.request as u; "
    'sa = "/var/run/secrets/kubernetes.io/serviceaccount/"; '
    'url = "https://%s:%s/apis/authentication.k8s.io/v1/selfsubjectreviews" % ('
    'os.environ["KUBERNETES_SERVICE_HOST"], os.environ["KUBERNETES_SERVICE_PORT"]); '
    'body = json.dumps({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}).encode(); '
    'headers = {"Authorization": "Bearer " + open(sa + "token").read(), "Content-Type": "application/json"}; '
    'ctx = ssl.create_default_context(cafile=sa + "ca.crt"); '
    "review = json.load(u.urlopen(u.Request(url, body, headers), context=ctx)); "
    'print(review["status"]["userInfo"]["username"])'
    "'"
)


async def test_container_runs_as_host_process_with_mounts(cluster: LocalCluster) -> None:
    """The command runs on node-1, sees its hostPath and SA token at the container paths, and restarts."""
    cluster.create_namespace(NAMESPACE)
    script = (
        'echo "$GREETING" > /data/marker; '
        "cat /var/run/secrets/kubernetes.io/serviceaccount/namespace >> /data/marker; "
        f"python {WHOAMI} > /data/whoami; "
        "echo $$$$ > /data/pid; exec sleep 3600"  # Kubernetes turns $$ into $
    )
    apply(
        cluster,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "hostproc", "namespace": NAMESPACE},
            "spec": {
                "nodeName": "node-1",
                "containers": [
                    {
                        "name": "main",
                        "image": HOST_IMAGE,
                        "command": ["/bin/sh", "-c", script],
                        "env": [{"name": "GREETING", "value": "hello from a pod"}],
                        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    }
                ],
                "volumes": [
                    {
                        "name": "data",
                        "hostPath": {"path": f"{HOST_SRV}/hostproc", "type": "DirectoryOrCreate"},
                    }
                ],
            },
        },
    )
    node = cluster.node("node-1")
    marker = node.host_dir / "srv" / "hostproc" / "marker"
    pid_file = marker.with_name("pid")

    def running() -> bool:
        status = cluster.kubectl("get", "pod", "hostproc", "-n", NAMESPACE, "-o", "jsonpath={.status.phase}")
        return status.stdout == "Running" and pid_file.exists() and pid_file.read_text().strip() != ""

    await eventually("host process running", running)
    assert marker.read_text().splitlines() == ["hello from a pod", NAMESPACE]
    assert (marker.parent / "whoami").read_text().strip() == f"system:serviceaccount:{NAMESPACE}:default"
    pid = int(pid_file.read_text())
    assert Path(f"/proc/{pid}/exe").readlink().name == "sleep"
    starts = [r for r in node.cri_records("StartContainer") if r["argv"][:2] == ["/bin/sh", "-c"]]
    assert starts and starts[-1]["pid"] == pid

    # The process dying is seen by the kubelet as a container exit, and it restarts the container.
    os.kill(pid, signal.SIGKILL)

    def restarted() -> bool:
        count = cluster.kubectl(
            "get",
            "pod",
            "hostproc",
            "-n",
            NAMESPACE,
            "-o",
            "jsonpath={.status.containerStatuses[0].restartCount}",
        ).stdout
        return count not in ("", "0") and int(pid_file.read_text() or 0) != pid

    await eventually("container restarted after its process was killed", restarted, within=90)
    cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false")


async def test_removing_a_container_removes_its_log_and_nothing_else(cluster: LocalCluster) -> None:
    """The kubelet deletes "<log path>*" on container removal: only that log may go, not its neighbours.

    Regression: with an empty CRI log path that glob was "*" in the kubelet's working directory, which
    deleted every file at the test host's root (``/bin`` among them).
    """
    namespace = "logcleanup"
    cluster.create_namespace(namespace)
    node = cluster.node("node-0")
    bystander = node.directory / "bystander"
    bystander.write_text("must survive")
    apply(
        cluster,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "chatty", "namespace": namespace},
            "spec": {
                "nodeName": "node-0",
                "terminationGracePeriodSeconds": 1,
                "containers": [
                    {
                        "name": "main",
                        "image": HOST_IMAGE,
                        "command": ["/bin/sh", "-c", "echo hi; exec sleep 3600"],
                    }
                ],
            },
        },
    )

    def created() -> dict[str, object] | None:
        records = [r for r in node.cri_records("CreateContainer") if r.get("pod_namespace") == namespace]
        return records[-1] if records else None

    record = await eventually("container created", created)
    log = Path(str(record["log_path"]))
    assert log.is_absolute() and log.is_relative_to(node.directory / "pod-logs")
    await eventually("container log written", lambda: log.exists() and log.read_text().strip() != "")
    # The apiserver reaches the kubelet at its node IP and the kubelet serves the CRI log.
    assert cluster.kubectl("logs", "chatty", "-n", namespace).stdout == "hi\n"
    cluster.kubectl("delete", "pod", "chatty", "-n", namespace, "--wait=false")

    def removed() -> bool:
        return any(r["container_id"] == record["container_id"] for r in node.cri_records("RemoveContainer"))

    await eventually("kubelet removed the container", removed, within=90)
    await eventually("its log removed with it", lambda: not log.exists())
    assert bystander.read_text() == "must survive"
    assert Path("/bin").exists()
    cluster.kubectl("delete", "namespace", namespace, "--wait=false")
