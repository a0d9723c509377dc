"""The rendered chart is accepted by the real API server (server-side dry-run apply, CRDs included).

Server-side apply runs the full admission chain and validation (schemas, CEL compilation of the
DeviceClass selectors and admission policies, RBAC escalation checks for the Roles) without
persisting anything, so it cannot disturb other tests sharing the cluster.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from imexdra_sim.localcluster.cluster import LocalCluster
from tests.unit.chart.helm import render

NAMESPACE = "chart-dryrun"
ADDITIONAL = "chart-dryrun-old"

VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "host-managed": {"featureGates": {"HostManagedIMEX": True}},
    "everything-on": {
        "featureGates": {"ComputeDomainCliques": False},
        "imagePullSecrets": [{"name": "regcred"}],
        "altProcDevices": "/srv/imexdra-test/proc-devices",
        "controller": {
            "replicas": 2,
            "leaderElection": {"enabled": True},
            "networkPolicy": {"enabled": True},
            "metrics": {"httpEndpoint": "$(POD_IP):8080"},
            "containers": {
                "computeDomain": {"env": [{"name": "ADDITIONAL_NAMESPACES", "value": ADDITIONAL}]}
            },
        },
        "kubeletPlugin": {
            "networkPolicy": {"enabled": True},
            "containers": {"computeDomains": {"gpuCliqueLabelEnabled": True, "healthcheckPort": -1}},
        },
    },
}


@pytest.fixture(scope="module")
def namespaces(cluster: LocalCluster) -> Iterator[None]:
    """The release namespace and one additional namespace (dry-run needs them to exist)."""
    for name in (NAMESPACE, ADDITIONAL):
        cluster.create_namespace(name)
    yield
    for name in (NAMESPACE, ADDITIONAL):
        cluster.kubectl("delete", "namespace", name, "--wait=false", check=False)


@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_server_side_dry_run_accepts_the_rendered_chart(
    cluster: LocalCluster, namespaces: None, values: dict[str, Any]
) -> None:
    """Every rendered object, CRDs included, passes server-side validation and admission."""
    rendered = render(values, namespace=NAMESPACE, extra=("--include-crds",))
    kinds = {obj["kind"] for obj in rendered.objects}
    assert {"CustomResourceDefinition", "Deployment", "DaemonSet", "DeviceClass", "ClusterRole"} <= kinds
    result = cluster.kubectl(
        "apply",
        "--server-side",
        "--dry-run=server",
        "--force-conflicts",
        "--field-manager=chart-dryrun",
        "-f",
        "-",
        input=rendered.manifest,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    applied = [line for line in result.stdout.splitlines() if "(server dry run)" in line]
    assert len(applied) == len(rendered.objects), result.stdout
