"""A simulated rack with imexdra installed by its Helm chart, one per IMEX mode, for the e2e tier.

The bring-up is the demo's (``imexdra_sim.rack.bring_up``): real control plane and kubelets, fake
GB200 hardware per node, the real Kubeflow MPI Operator, and the chart's controller and kubelet
plugin running as pods: host processes through fakecri, or real containers of the project's image
on containerd nodes (``real_nodes_rack``, docs/node-runtime.md).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from imexdra_sim import rack
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.e2e.racks import (
    BINDING_CONDITIONS,
    CHANNEL_ISOLATION,
    DRIVER_MANAGED,
    HOST_MANAGED,
    HOST_MANAGED_NODE_LOSS,
    LEADER_ELECTION,
    NETWORK_POLICY,
    NODE_LOSS,
    QUIET,
    REAL_NODES,
    SEED_RACK,
    UPGRADE,
)
from tests.support.checkouts import Checkout, earlier_release
from tests.support.session import failure_count, progress, stop_cluster
from tests.support.waiting import wait_until


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Everything under tests/e2e carries the e2e marker."""
    for item in items:
        if "tests/e2e/" in str(item.path):
            item.add_marker(pytest.mark.e2e)


def _rack(
    config: rack.RackConfig,
    pytestconfig: pytest.Config,
    install: Callable[[LocalCluster], None] | None = None,
) -> Iterator[LocalCluster]:
    cluster = rack.new_rack_cluster(config)
    mode = "HostManagedIMEX" if config.host_managed else "driver-managed"
    progress(pytestconfig, f"bringing up a {config.nodes}-node {mode} rack in {cluster.run_dir} ...")
    try:
        rack.bring_up(cluster, config, lambda title: _step(pytestconfig, title), install)
    except Exception:
        cluster.stop()
        progress(pytestconfig, f"rack failed to come up; logs kept in {cluster.run_dir}/logs")
        raise
    failed = failure_count(pytestconfig)
    yield cluster
    stop_cluster(cluster, pytestconfig, failed, "rack")


@contextmanager
def _step(config: pytest.Config, title: str) -> Iterator[None]:
    """Print one bring-up phase as progress."""
    progress(config, f"  {title}")
    yield


@pytest.fixture(scope="module")
def host_managed_rack(pytestconfig: pytest.Config) -> Iterator[LocalCluster]:
    """Three nodes under HostManagedIMEX; gb200-02 has no NVLink fabric (empty clique)."""
    yield from _rack(HOST_MANAGED, pytestconfig)


@pytest.fixture(scope="module")
def real_nodes_rack(pytestconfig: pytest.Config) -> Iterator[LocalCluster]:
    """Two nodes in one clique on containerd + runc, driver-managed IMEX, the project's image."""
    yield from _rack(REAL_NODES, pytestconfig)


@pytest.fixture(scope="module")
def network_policy_rack(pytestconfig: pytest.Config) -> Iterator[LocalCluster]:
    """Two containerd nodes in one clique, driver-managed, NetworkPolicies enforced by kube-router."""
    yield from _rack(NETWORK_POLICY, pytestconfig)


@pytest.fixture(scope="module")
def seed_rack(pytestconfig: pytest.Config) -> Iterator[LocalCluster]:
    """18 GB200 trays in one clique (containerd), driver-managed IMEX: a full NVL72 rack."""
    yield from _rack(SEED_RACK, pytestconfig)


@pytest.fixture(scope="module")
def driver_managed_rack(pytestconfig: pytest.Config) -> Iterator[LocalCluster]:
    """Two nodes in one clique under driver-managed IMEX, installed with upstream's values file underneath."""
    yield from _rack(DRIVER_MANAGED, pytestconfig)


@pytest.fixture(scope="module")
def binding_conditions_rack(pytestconfig: pytest.Config) -> Iterator[LocalCluster]:
    """Two nodes of one clique, driver-managed, gate ComputeDomainBindingConditions on.

    Yielded once every node's slice carries the conditions: ``helm install --wait`` can return before
    a plugin has published, and a claim allocated from no slice or an old one has no conditions.
    """
    for cluster in _rack(BINDING_CONDITIONS, pytestconfig):
        wait_until(
            "every node's slice with the binding conditions",
            functools.partial(rack.slices_follow_gate, cluster, True),
        )
        yield cluster


@pytest.fixture(scope="module")
def channel_isolation_rack(pytestconfig: pytest.Config) -> Iterator[LocalCluster]:
    """Four nodes of one clique under HostManagedIMEX with ``imex.isolation=channel``."""
    yield from _rack(CHANNEL_ISOLATION, pytestconfig)


@pytest.fixture(scope="module")
def node_loss_rack(pytestconfig: pytest.Config) -> Iterator[LocalCluster]:
    """Four nodes of one clique, driver-managed; a silent node is marked Unknown after 20 s."""
    yield from _rack(NODE_LOSS, pytestconfig)


@pytest.fixture(scope="module")
def host_managed_node_loss_rack(pytestconfig: pytest.Config) -> Iterator[LocalCluster]:
    """Three nodes of one clique under HostManagedIMEX; a silent node is marked Unknown after 20 s."""
    yield from _rack(HOST_MANAGED_NODE_LOSS, pytestconfig)


@pytest.fixture(scope="module")
def leader_election_rack(pytestconfig: pytest.Config) -> Iterator[LocalCluster]:
    """Two nodes; two controller replicas under leader election (the rack's chart values turn it on)."""
    yield from _rack(LEADER_ELECTION, pytestconfig)


@pytest.fixture(scope="module")
def quiet_rack(pytestconfig: pytest.Config) -> Iterator[LocalCluster]:
    """One node; the controller and the kubelet plugin at logVerbosity 0 (the chart's default is 4)."""
    yield from _rack(QUIET, pytestconfig)


@pytest.fixture(scope="module")
def earlier_checkout(
    pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Checkout]:
    """The ``--upgrade-from`` commit checked out, its image built (tests/support/checkouts.py)."""
    commit = str(pytestconfig.getoption("upgrade_from"))
    progress(pytestconfig, f"building the image of {commit}, the earlier release ...")
    with earlier_release(commit, tmp_path_factory.mktemp("earlier")) as checkout:
        yield checkout


@pytest.fixture(scope="module")
def upgrade_rack(pytestconfig: pytest.Config, earlier_checkout: Checkout) -> Iterator[LocalCluster]:
    """Two containerd nodes with the earlier release published under ``<registry>/previous`` and installed."""

    def install(cluster: LocalCluster) -> None:
        earlier = rack.publish_release(
            cluster, archive=earlier_checkout.archive, chart_dir=earlier_checkout.chart_dir, prefix="previous"
        )
        rack.install_chart(cluster, UPGRADE, chart=rack.release_chart(cluster, earlier))

    yield from _rack(UPGRADE, pytestconfig, install)
