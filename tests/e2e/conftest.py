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
from tests.e2e.pool import RackFixtures, RackPool, handed_on, order_by_rack
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

#: The racks the modules ask for by fixture name; modules asking for the same one share it (pool.py).
RACK_FIXTURES: RackFixtures = {
    "host_managed_rack": HOST_MANAGED,
    "real_nodes_rack": REAL_NODES,
    "network_policy_rack": NETWORK_POLICY,
    "seed_rack": SEED_RACK,
    "driver_managed_rack": DRIVER_MANAGED,
    "binding_conditions_rack": BINDING_CONDITIONS,
    "channel_isolation_rack": CHANNEL_ISOLATION,
    "node_loss_rack": NODE_LOSS,
    "host_managed_node_loss_rack": HOST_MANAGED_NODE_LOSS,
    "leader_election_rack": LEADER_ELECTION,
    "quiet_rack": QUIET,
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Everything under tests/e2e carries the e2e marker; modules sharing a rack run back to back."""
    slots = [index for index, item in enumerate(items) if "tests/e2e/" in str(item.path)]
    e2e = [items[index] for index in slots]
    for item in e2e:
        item.add_marker(pytest.mark.e2e)
    order_by_rack(config, e2e, RACK_FIXTURES)
    for index, item in zip(slots, e2e, strict=True):
        items[index] = item


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


@pytest.fixture(scope="session")
def rack_pool(pytestconfig: pytest.Config) -> Iterator[RackPool]:
    """The e2e session's racks, one up at a time (tests/e2e/pool.py)."""
    pool = RackPool(pytestconfig, lambda config: _rack(config, pytestconfig))
    yield pool
    pool.stop()


def _pooled(
    request: pytest.FixtureRequest, pool: RackPool, config: rack.RackConfig
) -> Iterator[LocalCluster]:
    """A module's rack from the pool; afterwards handed on emptied, or stopped when no module shares it."""
    yield pool.rack(config)
    if handed_on(request.config, request.node.nodeid):
        pool.hand_on()
    else:
        pool.stop()


@contextmanager
def _step(config: pytest.Config, title: str) -> Iterator[None]:
    """Print one bring-up phase as progress."""
    progress(config, f"  {title}")
    yield


@pytest.fixture(scope="module")
def host_managed_rack(request: pytest.FixtureRequest, rack_pool: RackPool) -> Iterator[LocalCluster]:
    """Three nodes under HostManagedIMEX; gb200-02 has no NVLink fabric (empty clique)."""
    yield from _pooled(request, rack_pool, HOST_MANAGED)


@pytest.fixture(scope="module")
def real_nodes_rack(request: pytest.FixtureRequest, rack_pool: RackPool) -> Iterator[LocalCluster]:
    """Two nodes in one clique on containerd + runc, driver-managed IMEX, the project's image pulled from
    the cluster's registry, NetworkPolicies enforced (the same rack as ``network_policy_rack``)."""
    yield from _pooled(request, rack_pool, REAL_NODES)


@pytest.fixture(scope="module")
def network_policy_rack(request: pytest.FixtureRequest, rack_pool: RackPool) -> Iterator[LocalCluster]:
    """Two containerd nodes in one clique, driver-managed, NetworkPolicies enforced by kube-router
    (the same rack as ``real_nodes_rack``)."""
    yield from _pooled(request, rack_pool, NETWORK_POLICY)


@pytest.fixture(scope="module")
def seed_rack(request: pytest.FixtureRequest, rack_pool: RackPool) -> Iterator[LocalCluster]:
    """18 GB200 trays in one clique (containerd), driver-managed IMEX: a full NVL72 rack."""
    yield from _pooled(request, rack_pool, SEED_RACK)


@pytest.fixture(scope="module")
def driver_managed_rack(request: pytest.FixtureRequest, rack_pool: RackPool) -> Iterator[LocalCluster]:
    """Two nodes in one clique under driver-managed IMEX, installed with upstream's values file underneath."""
    yield from _pooled(request, rack_pool, DRIVER_MANAGED)


@pytest.fixture(scope="module")
def binding_conditions_rack(request: pytest.FixtureRequest, rack_pool: RackPool) -> Iterator[LocalCluster]:
    """Two nodes of one clique, driver-managed, gate ComputeDomainBindingConditions on.

    Yielded once every node's slice carries the conditions: ``helm install --wait`` can return before
    a plugin has published, and a claim allocated from no slice or an old one has no conditions.
    """
    for cluster in _pooled(request, rack_pool, BINDING_CONDITIONS):
        wait_until(
            "every node's slice with the binding conditions",
            functools.partial(rack.slices_follow_gate, cluster, True),
        )
        yield cluster


@pytest.fixture(scope="module")
def channel_isolation_rack(request: pytest.FixtureRequest, rack_pool: RackPool) -> Iterator[LocalCluster]:
    """Four nodes of one clique under HostManagedIMEX with ``imex.isolation=channel``."""
    yield from _pooled(request, rack_pool, CHANNEL_ISOLATION)


@pytest.fixture(scope="module")
def node_loss_rack(request: pytest.FixtureRequest, rack_pool: RackPool) -> Iterator[LocalCluster]:
    """Four nodes of one clique, driver-managed; a silent node is marked Unknown after 20 s."""
    yield from _pooled(request, rack_pool, NODE_LOSS)


@pytest.fixture(scope="module")
def host_managed_node_loss_rack(
    request: pytest.FixtureRequest, rack_pool: RackPool
) -> Iterator[LocalCluster]:
    """Three nodes of one clique under HostManagedIMEX; a silent node is marked Unknown after 20 s."""
    yield from _pooled(request, rack_pool, HOST_MANAGED_NODE_LOSS)


@pytest.fixture(scope="module")
def leader_election_rack(request: pytest.FixtureRequest, rack_pool: RackPool) -> Iterator[LocalCluster]:
    """Two nodes; two controller replicas under leader election (the rack's chart values turn it on)."""
    yield from _pooled(request, rack_pool, LEADER_ELECTION)


@pytest.fixture(scope="module")
def quiet_rack(request: pytest.FixtureRequest, rack_pool: RackPool) -> Iterator[LocalCluster]:
    """Two nodes; the controller and the kubelet plugin at logVerbosity 0 (the chart's default is 4)."""
    yield from _pooled(request, rack_pool, QUIET)


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
