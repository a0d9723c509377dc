"""The Kubernetes a test cluster runs, as its apiserver and kubelets report it (docs/kubernetes-versions.md).

The version smoke (`make smoke-versions`) runs the same e2e modules on each minor the chart admits;
these checks show that the selection (``IMEXDRA_KUBE_VERSION``) reached every component, and record
the apiserver's version in the JUnit report the smoke reads.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from imexdra_sim.localcluster.binaries import kube_version
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.support.kubectl import get_json

RECORDED_PROPERTY = "kubernetes_version"
"""The JUnit test-suite property that carries the apiserver's gitVersion (read by bench/kube_versions.py)."""


def reported_versions(cluster: LocalCluster) -> tuple[str, set[str]]:
    """The apiserver's gitVersion and the set of its nodes' kubelet versions."""
    server = json.loads(cluster.kubectl("version", "--output=json").stdout)["serverVersion"]["gitVersion"]
    kubelets = {node["status"]["nodeInfo"]["kubeletVersion"] for node in get_json(cluster, "nodes")["items"]}
    return str(server), kubelets


def check_selected_kubernetes(cluster: LocalCluster, record: Callable[[str, object], None]) -> None:
    """Record the apiserver's version, then check it and every kubelet are the selected Kubernetes."""
    server, kubelets = reported_versions(cluster)
    record(RECORDED_PROPERTY, server)
    assert (server, kubelets) == (f"v{kube_version()}", {server})
