"""The migration procedure of docs/migration.md as test steps, shared by the migration e2e modules.

Release and namespace are upstream's usual ones; ``switch`` runs §3's steps (and §6's, backwards).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from imexdra_sim import rack
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.e2e.helpers import is_ready
from tests.support.kubectl import get_json
from tests.support.session import failure_count, progress, stop_cluster
from tests.support.upstream import UPSTREAM_VALUES_FILE

CONFIG = rack.RackConfig(nodes=2, values_files=(UPSTREAM_VALUES_FILE,))
NAMESPACE = "dra-driver-nvidia-gpu"
UPSTREAM = "dra-driver-nvidia-gpu"
"""Release name of the install taken over; also its chart name (``nameOverride``), as upstream's."""
IMEXDRA = "imexdra"

#: Objects both charts create under the same name (docs/migration.md §2): the uninstall must keep them.
SHARED = (
    ("deviceclass", "compute-domain-default-channel.nvidia.com"),
    ("deviceclass", "compute-domain-daemon.nvidia.com"),
    ("serviceaccount", "compute-domain-daemon-service-account"),
)
KEEP = "helm.sh/resource-policy"


def daemon_rbac(release: str) -> tuple[tuple[str, str], ...]:
    """The daemons' Role and RoleBinding of a release: running daemons need them until the next is in."""
    return (("role", f"{release}-compute-domain-daemon"), ("rolebinding", f"{release}-compute-domain-daemon"))


def bare_rack(pytestconfig: pytest.Config) -> Iterator[LocalCluster]:
    """Two nodes of one clique with their hardware and no driver installed yet (a fixture's body)."""
    cluster = rack.new_rack_cluster(CONFIG)
    progress(pytestconfig, f"bringing up a 2-node rack without a driver in {cluster.run_dir} ...")
    try:
        cluster.start()
        rack.create_host_placeholders()
        for index, node in enumerate(cluster.nodes):
            rack.write_node_hardware(node, CONFIG, index)
            rack.advertise_gpus(cluster, node)
    except Exception:
        cluster.stop()
        raise
    failed = failure_count(pytestconfig)
    yield cluster
    stop_cluster(cluster, pytestconfig, failed, "rack")


def helm(cluster: LocalCluster, *args: str) -> str:
    """Run the cluster's helm in the driver namespace; raise with its output if it fails."""
    assert cluster.binaries is not None
    helm_binary = str(cluster.binaries.path("helm"))
    scope = (f"--kubeconfig={cluster.kubeconfig}", f"--namespace={NAMESPACE}")
    return cluster.run(helm_binary, *args, *scope, timeout=240).stdout


def install(cluster: LocalCluster, release: str, *flags: str) -> None:
    """``helm install`` the chart as ``release`` with upstream's values file and the rack's values."""
    assert cluster.run_dir is not None
    values = cluster.run_dir / f"{release}-values.yaml"
    values.write_text(yaml.safe_dump(rack.chart_values(CONFIG)))
    files = (f"--values={UPSTREAM_VALUES_FILE}", f"--values={values}")
    helm(cluster, "install", release, str(rack.CHART), *files, *flags, "--wait", "--timeout=180s")


def install_upstream(cluster: LocalCluster, *flags: str) -> None:
    """The install to take over: upstream's release, namespace and object names."""
    install(cluster, UPSTREAM, f"--set=nameOverride={UPSTREAM}", *flags)


def switch(
    cluster: LocalCluster,
    old: str,
    install_new: Callable[..., None],
    old_daemon_rbac: tuple[tuple[str, str], ...] | None = None,
) -> None:
    """docs/migration.md §3 and §6: keep the shared objects, empty and uninstall ``old``, install the new.

    ``old_daemon_rbac``: the old release's daemon RBAC to keep (default: this chart's, ``daemon_rbac``).
    """
    kept_rbac = daemon_rbac(old) if old_daemon_rbac is None else old_daemon_rbac
    for kind, name in (*SHARED, *kept_rbac):
        cluster.kubectl("annotate", kind, name, "-n", NAMESPACE, f"{KEEP}=keep", "--overwrite")
    assert cluster.run_dir is not None
    empty = cluster.run_dir / "empty-chart"
    empty.mkdir(exist_ok=True)
    (empty / "Chart.yaml").write_text("apiVersion: v2\nname: empty\nversion: 0.0.0\n")
    helm(cluster, "upgrade", old, str(empty), "--wait", "--timeout=180s")
    selector = f"{old}-component"  # the chart's pods' selector label: controller and kubelet plugin
    cluster.kubectl(
        "wait", "--for=delete", "pod", "-n", NAMESPACE, "-l", selector, "--timeout=180s", timeout=200
    )
    helm(cluster, "uninstall", old, "--wait")
    install_new(cluster, "--take-ownership")
    for kind, name in SHARED:
        cluster.kubectl("annotate", kind, name, "-n", NAMESPACE, f"{KEEP}-")


def uids(cluster: LocalCluster, objects: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """``kind/name`` -> UID of objects in the driver namespace (or cluster-scoped): the same object kept."""
    return {
        f"{kind}/{name}": get_json(cluster, kind, name, "-n", NAMESPACE)["metadata"]["uid"]
        for kind, name in objects
    }


def release_of(cluster: LocalCluster, kind: str, name: str) -> str:
    """The Helm release an object belongs to (its ``meta.helm.sh/release-name``)."""
    annotations = get_json(cluster, kind, name, "-n", NAMESPACE)["metadata"].get("annotations", {})
    return str(annotations.get("meta.helm.sh/release-name", ""))


def plugins_of(cluster: LocalCluster, release: str) -> list[dict[str, Any]]:
    """The release's kubelet-plugin pods, Ready, one per node, or [] until they are."""
    selector = f"app.kubernetes.io/instance={release},app.kubernetes.io/component=kubelet-plugin"
    pods = get_json(cluster, "pods", "-n", NAMESPACE, "-l", selector)["items"]
    ready = [p for p in pods if is_ready(p) and not p["metadata"].get("deletionTimestamp")]
    return ready if len(ready) == len(cluster.nodes) else []
