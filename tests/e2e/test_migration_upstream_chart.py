"""Taking over an install of upstream's own chart (docs/migration.md §8), when a checkout of it is given.

    pytest tests/e2e/test_migration_upstream_chart.py --upstream-checkout=<NVIDIA/k8s-dra-driver-gpu>

Upstream's chart is public source, but neither it nor its Go images can be fetched on the CI machine,
and imexdra does not copy it; so this module is collected only with a checkout (tests/conftest.py).
It installs that chart as upstream's users do (``resources.gpus.enabled=false``, the ComputeDomain
side only), whose pods cannot start here (their images are not on the nodes) while every object of
the release is in the cluster, its CRDs included. A ComputeDomain is created under it, then §3's steps
run: the shared objects keep their UIDs and pass to imexdra, upstream's daemon RBAC stays, upstream's
CRDs stay as they were, and imexdra's controller and plugins run the domain on them: its pods get
their channels and it becomes Ready.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from imexdra.api.constants import COMPUTE_DOMAIN_FINALIZER
from imexdra_sim.builders import compute_domain
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.e2e import migration
from tests.e2e.helpers import domain_status, remove_workloads, start_domain_workload
from tests.e2e.migration import IMEXDRA, NAMESPACE, SHARED, UPSTREAM, helm, install, plugins_of, release_of
from tests.support.kubectl import apply, get_json
from tests.support.waiting import wait_until

WORKLOADS = "taken-over"
DOMAIN = "made-under-upstream"
#: Upstream's chart gives the daemons cluster-wide RBAC under fixed names (docs/migration.md §1).
UPSTREAM_DAEMON_RBAC = (
    ("clusterrole", "compute-domain-daemon-role"),
    ("clusterrolebinding", "compute-domain-daemon-role-binding"),
)
CRDS = ("computedomains.resource.nvidia.com", "computedomaincliques.resource.nvidia.com")


@pytest.fixture(scope="module")
def upstream_chart(pytestconfig: pytest.Config) -> Path:
    """The chart directory of the given upstream checkout."""
    checkout = pytestconfig.getoption("upstream_checkout")
    if not checkout:  # a directory run does not collect this module without one (tests/conftest.py)
        pytest.fail("this module needs --upstream-checkout=<a checkout of NVIDIA/k8s-dra-driver-gpu>")
    charts = sorted(Path(checkout).glob("deployments/helm/*/Chart.yaml"))
    assert len(charts) == 1, f"no single chart under {checkout}/deployments/helm: {charts}"
    return charts[0].parent


@pytest.fixture(scope="module")
def bare_rack(pytestconfig: pytest.Config, upstream_chart: Path) -> Iterator[LocalCluster]:
    """Two nodes of one clique with their hardware and no driver installed yet."""
    yield from migration.bare_rack(pytestconfig)


def test_taking_over_upstreams_own_install(bare_rack: LocalCluster, upstream_chart: Path) -> None:
    """Upstream's chart installed, a domain made under it; after §3 imexdra runs that domain on its CRDs."""
    cluster = bare_rack
    cluster.create_namespace(NAMESPACE)
    # No --wait: upstream's images are not on these nodes, so its pods never start; its objects are there.
    helm(cluster, "install", UPSTREAM, str(upstream_chart), "--set=resources.gpus.enabled=false")
    for kind, name in (*SHARED, *UPSTREAM_DAEMON_RBAC, ("deployment", f"{UPSTREAM}-controller")):
        assert release_of(cluster, kind, name) == UPSTREAM, f"{kind}/{name} is not upstream's"
    crds = {name: get_json(cluster, "crd", name) for name in CRDS}
    cluster.create_namespace(WORKLOADS)
    apply(cluster, compute_domain(DOMAIN, WORKLOADS, num_nodes=2))
    shared = migration.uids(cluster, SHARED)
    rbac = migration.uids(cluster, UPSTREAM_DAEMON_RBAC)

    migration.switch(
        cluster, UPSTREAM, lambda c, *flags: install(c, IMEXDRA, *flags), old_daemon_rbac=UPSTREAM_DAEMON_RBAC
    )

    wait_until("imexdra's kubelet plugin Ready on every node", lambda: plugins_of(cluster, IMEXDRA))
    assert helm(cluster, "list", "--short").split() == [IMEXDRA]
    assert migration.uids(cluster, SHARED) == shared
    assert all(release_of(cluster, kind, name) == IMEXDRA for kind, name in SHARED)
    assert migration.uids(cluster, UPSTREAM_DAEMON_RBAC) == rbac  # kept for upstream's daemons (§3 step 5)
    for name, before in crds.items():  # upstream's CRDs stay as they were: Helm never replaces crds/
        after = get_json(cluster, "crd", name)
        assert (after["metadata"]["uid"], after["spec"]) == (before["metadata"]["uid"], before["spec"])

    nodes = [node.name for node in cluster.nodes]
    start_domain_workload(cluster, WORKLOADS, DOMAIN, nodes, num_nodes=2)  # the domain is the one made before
    cd = get_json(cluster, "computedomain", DOMAIN, "-n", WORKLOADS)
    assert cd["metadata"]["finalizers"] == [COMPUTE_DOMAIN_FINALIZER]
    assert domain_status(cluster, WORKLOADS, DOMAIN)["status"] == "Ready"
    remove_workloads(cluster, WORKLOADS)
