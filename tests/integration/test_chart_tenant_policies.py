"""The chart's tenant admission policies on the real API server (docs/tenancy.md).

The chart's identities and policies are installed for release ``tenantpol``; claims and claim templates
are then created (server-side dry run, as cluster admin — the policies do not care who asks) in a
tenant namespace and in the driver namespace. The e2e attack suite (tests/e2e/test_tenant_boundaries.py)
runs the same refusals as a tenant with the stock ``edit`` role on a rack.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from imexdra.api.constants import DEVICE_CLASS_DAEMON, DEVICE_CLASS_DEFAULT_CHANNEL, DRIVER_NAME
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.unit.chart.install import install_chart_rbac

RELEASE = "tenantpol"
DRIVER_NAMESPACE = "tenantpol-driver"
TENANT = "tenantpol-team"
UID = "5f0c2c7e-0d2b-4c5e-8f6a-0123456789ab"
DAEMON_CLASS_REFUSED = f"DeviceClass {DEVICE_CLASS_DAEMON} is reserved for the IMEX daemons"
DAEMON_CONFIG_REFUSED = "ComputeDomainDaemonConfig is reserved for the IMEX daemons"
DOMAIN_ID_REFUSED = f"domainID must be the metadata.uid of a ComputeDomain of namespace {TENANT}"


@pytest.fixture(scope="module")
def policies(cluster: LocalCluster) -> Iterator[None]:
    """The chart's policies installed and enforced; removed afterwards."""
    installed = install_chart_rbac(cluster, release=RELEASE, namespace=DRIVER_NAMESPACE)
    cluster.create_namespace(TENANT)
    deadline = time.monotonic() + 30
    while admitted(cluster, daemon_claim(TENANT)) is None:  # the policies load asynchronously
        assert time.monotonic() < deadline, "the tenant policies were not enforced within 30 s"
        time.sleep(0.2)
    yield
    installed.uninstall()
    for namespace in (DRIVER_NAMESPACE, TENANT):
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def admitted(cluster: LocalCluster, obj: dict[str, Any]) -> str | None:
    """None when the API server admits ``obj`` (dry run); else its error text."""
    result = cluster.kubectl("create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(obj), check=False)
    return None if result.returncode == 0 else result.stderr


def claim(
    namespace: str, request: dict[str, Any], kind: str, domain_id: str, *, version: str = "v1"
) -> dict[str, Any]:
    """A ResourceClaim with one request and one opaque config of our driver."""
    params = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": kind, "domainID": domain_id}
    return {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "ResourceClaim",
        "metadata": {"name": "probe", "namespace": namespace},
        "spec": {
            "devices": {
                "requests": [{"name": "imex", **request}],
                "config": [{"opaque": {"driver": DRIVER_NAME, "parameters": params}}],
            }
        },
    }


def daemon_claim(namespace: str, domain_id: str = UID) -> dict[str, Any]:
    """The daemon DeviceClass with a ComputeDomainDaemonConfig."""
    request = {"exactly": {"deviceClassName": DEVICE_CLASS_DAEMON}}
    return claim(namespace, request, "ComputeDomainDaemonConfig", domain_id)


def channel_claim(namespace: str, domain_id: str = UID) -> dict[str, Any]:
    """The channel DeviceClass with a ComputeDomainChannelConfig."""
    request = {"exactly": {"deviceClassName": DEVICE_CLASS_DEFAULT_CHANNEL}}
    return claim(namespace, request, "ComputeDomainChannelConfig", domain_id)


def template(obj: dict[str, Any]) -> dict[str, Any]:
    """The claim's devices as a ResourceClaimTemplate."""
    return {**obj, "kind": "ResourceClaimTemplate", "spec": {"spec": obj["spec"]}}


def other_driver(obj: dict[str, Any]) -> dict[str, Any]:
    """The same config addressed to another driver (not ours to judge)."""
    config = obj["spec"]["devices"]["config"][0]
    return {
        **obj,
        "spec": {
            "devices": {
                **obj["spec"]["devices"],
                "config": [{**config, "opaque": {**config["opaque"], "driver": "gpu.example.com"}}],
            }
        },
    }


REFUSED = [
    ("daemon-class-claim", daemon_claim(TENANT), DAEMON_CLASS_REFUSED),
    ("daemon-class-template", template(daemon_claim(TENANT)), DAEMON_CLASS_REFUSED),
    (
        "daemon-class-first-available",
        claim(TENANT, {"firstAvailable": [{"name": "a", "deviceClassName": DEVICE_CLASS_DAEMON}]}, "X", UID),
        DAEMON_CLASS_REFUSED,
    ),
    (
        "daemon-config-on-channel-class",
        claim(
            TENANT,
            {"exactly": {"deviceClassName": DEVICE_CLASS_DEFAULT_CHANNEL}},
            "ComputeDomainDaemonConfig",
            UID,
        ),
        DAEMON_CONFIG_REFUSED,
    ),
    ("channel-domain-id-a-path", channel_claim(TENANT, "../../etc"), DOMAIN_ID_REFUSED),
    ("channel-domain-id-a-name", template(channel_claim(TENANT, "my-domain")), DOMAIN_ID_REFUSED),
    ("channel-domain-id-empty", channel_claim(TENANT, ""), DOMAIN_ID_REFUSED),
]

ADMITTED = [
    ("channel-claim", channel_claim(TENANT)),
    ("channel-template", template(channel_claim(TENANT))),
    ("daemon-template-in-driver-namespace", template(daemon_claim(DRIVER_NAMESPACE))),
    ("daemon-claim-in-driver-namespace", daemon_claim(DRIVER_NAMESPACE)),
    ("other-drivers-config", other_driver(channel_claim(TENANT, "anything"))),
]


@pytest.mark.parametrize(("obj", "message"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_refused_outside_the_driver_namespace(
    cluster: LocalCluster, policies: None, obj: dict[str, Any], message: str
) -> None:
    """What only the driver's daemons may hold, or a domainID that is no UID: refused, saying why."""
    error = admitted(cluster, obj)
    assert error is not None, "admitted"
    assert message in error, error


@pytest.mark.parametrize("obj", [a[1] for a in ADMITTED], ids=[a[0] for a in ADMITTED])
def test_admitted(cluster: LocalCluster, policies: None, obj: dict[str, Any]) -> None:
    """Workload channel claims, the controller's daemon objects and other drivers' configs pass."""
    assert admitted(cluster, obj) is None
