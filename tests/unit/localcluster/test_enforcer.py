"""The enforcer's build inputs, and a cluster asking for it unbuilt (docs/node-runtime.md §10)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from imexdra.common.errors import ConfigError
from imexdra_sim.localcluster.binaries import Binaries
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.support.paths import REPO

VERSIONS = dict(
    line.split("=", 1)
    for line in (REPO / "tools/k8s/versions.env").read_text().splitlines()
    if line and not line.startswith("#")
)
GO_MOD = (REPO / "tools/k8s/kuberouter/go.mod").read_text()


def required(module: str) -> str:
    """The version the enforcer's wrapper module requires of ``module``."""
    found = re.search(rf"^\s*(?:require\s+)?{re.escape(module)} (v\S+)", GO_MOD, re.MULTILINE)
    assert found, f"{module} is not required"
    return found.group(1)


def test_the_wrapper_builds_the_kube_router_version_of_versions_env() -> None:
    """tools/k8s/kuberouter requires kube-router at KUBE_ROUTER_VERSION (the build stamp's input)."""
    assert required("github.com/cloudnativelabs/kube-router/v2") == f"v{VERSIONS['KUBE_ROUTER_VERSION']}"


@pytest.mark.parametrize("module", ["k8s.io/client-go", "k8s.io/api", "k8s.io/apimachinery"])
def test_the_enforcer_links_the_clusters_kubernetes_libraries(module: str) -> None:
    """Its Kubernetes libraries are the cluster's staging version: the two builds share compiled packages."""
    assert required(module) == f"v{VERSIONS['STAGING_VERSION']}"


def test_a_cluster_asking_for_an_enforcer_that_is_not_built_says_how_to_build_it(tmp_path: Path) -> None:
    """Without kube-router-netpol and ipset in the bin dir, network_policy=True names them and `make k8s`."""
    with pytest.raises(ConfigError, match=r"kube-router-netpol, ipset missing in .*; run `make k8s` first"):
        LocalCluster(binaries=Binaries(tmp_path), run_dir=tmp_path / "run", network_policy=True)
