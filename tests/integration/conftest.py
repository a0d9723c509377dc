"""The real local control plane, started once per test session for the integration tier.

Nodes ``node-0`` and ``node-1`` run real kubelets on fakecri. Images under ``imexdra.test/`` run as
host processes; ``/srv/imexdra-test`` in a pod's hostPath is each node's own ``<node>/host/srv``.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from imexdra.api.constants import CRD_COMPUTE_DOMAIN_CLIQUES, CRD_COMPUTE_DOMAINS
from imexdra.common.kube.connection import connect
from imexdra.common.kube.kubeclient import KubeClient
from imexdra.common.kube.transport import Transport
from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.localcluster.nodes import GPU_NODE_LABELS, HostImage, NodeSpec
from tests.support.hostprocess import HOST_IMAGE, HOST_SRV
from tests.support.paths import CRD_DIR
from tests.support.session import failure_count, progress, stop_cluster


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Everything under tests/integration carries the integration marker."""
    for item in items:
        if "tests/integration/" in str(item.path):
            item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def cluster(pytestconfig: pytest.Config) -> Iterator[LocalCluster]:
    """A running local cluster with two simulated GB200 nodes in one clique."""
    specs = [
        NodeSpec(
            name=f"node-{i}",
            labels={**GPU_NODE_LABELS, "nvidia.com/gpu.clique": "test-cluster.0"},
            pod_cidr=f"127.100.{i + 1}.0/24",
        )
        for i in range(2)
    ]
    venv_bin = str(Path(sys.executable).parent)
    local = LocalCluster(
        nodes_specs=specs,
        host_images={HOST_IMAGE: HostImage(path=(venv_bin,))},
        host_path_map={HOST_SRV: "srv"},
    )
    progress(pytestconfig, f"starting local control plane + {len(specs)} kubelets in {local.run_dir} ...")
    try:
        local.start()
    except Exception:
        progress(pytestconfig, f"cluster failed to start; logs kept in {local.run_dir}/logs")
        raise
    secs = local.startup_seconds
    progress(
        pytestconfig,
        f"cluster ready in {secs['total']:.1f}s (control plane {secs['control_plane']:.1f}s, "
        f"nodes {secs['nodes']:.1f}s)",
    )
    failed_before = failure_count(pytestconfig)
    yield local
    stop_cluster(local, pytestconfig, failed_before)


@pytest.fixture(scope="session")
def compute_domain_crds(cluster: LocalCluster) -> None:
    """The ComputeDomain and ComputeDomainClique CRDs installed and Established (once per session)."""
    cluster.kubectl("apply", "-f", str(CRD_DIR))
    cluster.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        f"crd/{CRD_COMPUTE_DOMAINS}",
        f"crd/{CRD_COMPUTE_DOMAIN_CLIQUES}",
    )


@pytest.fixture(scope="session")
async def lean(cluster: LocalCluster) -> AsyncIterator[Transport]:
    """The lean API transport (``common.kube.transport``), authenticated as cluster admin."""
    transport = connect(cluster.kubeconfig).transport(user_agent="imexdra-tests")
    yield transport
    transport.close()


@pytest.fixture(scope="session")
async def api(cluster: LocalCluster) -> AsyncIterator[KubeClient]:
    """The project's typed client (``common.kube.kubeclient``), authenticated as cluster admin."""
    client = connect(cluster.kubeconfig).kube(field_manager="imexdra-tests")
    yield client
    client.close()


@pytest.fixture(scope="session")
def kube(api: KubeClient) -> KubeClient:
    """The same typed client, by the name the tests that set up and inspect objects take it."""
    return api
