"""The Kubernetes versions the local cluster can run: the default, and the other minors the chart admits.

The chart's ``kubeVersion`` floor, ``KUBE_COMPAT_VERSIONS`` in tools/k8s/versions.env, the wrapper
modules under tools/k8s/kube-<minor>/ and the harness's ``IMEXDRA_KUBE_VERSION`` selection are held to
one list here, so a minor the chart admits is one `make smoke-versions` tests (docs/kubernetes-versions.md).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from imexdra.common.errors import ConfigError
from imexdra_sim.localcluster import binaries
from tests.support.paths import REPO


def versions_env() -> dict[str, str]:
    """tools/k8s/versions.env as a dict (values unquoted)."""
    lines = (REPO / "tools/k8s/versions.env").read_text().splitlines()
    pairs = (line.split("=", 1) for line in lines if line and not line.startswith("#"))
    return {key: value.strip('"') for key, value in pairs}


COMPAT_VERSIONS = versions_env()["KUBE_COMPAT_VERSIONS"].split()


def test_the_harness_knows_the_versions_the_build_script_builds() -> None:
    """binaries.py's default and other versions are those of tools/k8s/versions.env."""
    assert versions_env()["KUBE_VERSION"] == binaries.KUBE_VERSION
    assert tuple(COMPAT_VERSIONS) == binaries.KUBE_COMPAT_VERSIONS


def test_the_harness_knows_the_prometheus_package_the_build_script_unpacks() -> None:
    """binaries.py looks for the prometheus package tools/k8s/prometheus.sh unpacks."""
    assert versions_env()["PROMETHEUS_DEB"] == f"prometheus={binaries.PROMETHEUS_DEB_VERSION}"


def minor(version: str) -> int:
    """The minor of ``1.<minor>[.<patch>...]``."""
    return int(version.split(".")[1])


def test_every_minor_the_chart_admits_is_built() -> None:
    """From the chart's kubeVersion floor up to the default, each minor has exactly one version to test."""
    chart = yaml.safe_load((REPO / "deployments/helm/imexdra/Chart.yaml").read_text())
    floor = re.fullmatch(r">=1\.(\d+)\.0-0", chart["kubeVersion"])
    assert floor is not None, chart["kubeVersion"]
    tested = sorted(minor(v) for v in [*COMPAT_VERSIONS, binaries.KUBE_VERSION])
    assert tested == list(range(int(floor.group(1)), minor(binaries.KUBE_VERSION) + 1))


@pytest.mark.parametrize("version", COMPAT_VERSIONS)
def test_each_other_version_has_its_wrapper_module(version: str) -> None:
    """tools/k8s/kube-<minor>/go.mod pins that Kubernetes and its staging modules at the same patch."""
    gomod = (REPO / f"tools/k8s/kube-{version.rsplit('.', 1)[0]}/go.mod").read_text()
    assert re.search(rf"^\s*k8s\.io/kubernetes v{re.escape(version)}\b", gomod, re.MULTILINE)
    staging = re.findall(r"^\s*k8s\.io/[a-z-]+ => k8s\.io/[a-z-]+ (v\S+)$", gomod, re.MULTILINE)
    assert staging and set(staging) == {f"v0.{version.split('.', 1)[1]}"}


def test_the_environment_selects_another_versions_binaries(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """IMEXDRA_KUBE_VERSION makes locate() look in k8s-<version>/bin and name build-kube.sh if it is empty."""
    monkeypatch.setenv("IMEXDRA_CACHE", str(tmp_path))
    monkeypatch.setenv(binaries.KUBE_VERSION_ENV, "1.35.8")
    assert binaries.kube_version() == "1.35.8"
    with pytest.raises(ConfigError, match=r"k8s-1\.35\.8/bin: etcd.*tools/k8s/build-kube\.sh 1\.35\.8"):
        binaries.locate()


def test_without_the_environment_the_default_version_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset (or empty), the harness runs the default version of versions.env."""
    monkeypatch.setenv(binaries.KUBE_VERSION_ENV, "")
    assert binaries.kube_version() == binaries.KUBE_VERSION
