"""The chart's tenant admission policies on the real API server (docs/tenancy.md).

The chart's identities and policies are installed for release ``tenantpol``; claims and claim templates
are then created (server-side dry run, as cluster admin — most policies do not care who asks) in a
tenant namespace and in the driver namespace. The isolated-channel DeviceClass is the exception: it is
admitted in a claim template only from the controller's ServiceAccount and in a claim only from the
resourceclaim controller (impersonated here), and both specs are immutable, so a tenant cannot edit
the controller's template to point at another domain's channel. The e2e attack suite
(tests/e2e/test_tenant_boundaries.py) runs the same refusals as a tenant with the stock ``edit`` role
on a rack.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from imexdra.api.constants import (
    DEVICE_CLASS_CHANNEL,
    DEVICE_CLASS_DAEMON,
    DEVICE_CLASS_DEFAULT_CHANNEL,
    DRIVER_NAME,
)
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.support.waiting import wait_until
from tests.unit.chart.install import install_chart_rbac

RELEASE = "tenantpol"
DRIVER_NAMESPACE = "tenantpol-driver"
TENANT = "tenantpol-team"
UID = "5f0c2c7e-0d2b-4c5e-8f6a-0123456789ab"
DAEMON_CLASS_REFUSED = f"DeviceClass {DEVICE_CLASS_DAEMON} is reserved for the IMEX daemons"
DAEMON_CONFIG_REFUSED = "ComputeDomainDaemonConfig is reserved for the IMEX daemons"
DOMAIN_ID_REFUSED = f"domainID must be the metadata.uid of a ComputeDomain of namespace {TENANT}"
ISOLATED_CLAIM_REFUSED = "its claims are made by Kubernetes from the ComputeDomain's ResourceClaimTemplate"
ISOLATED_TEMPLATE_REFUSED = "only imexdra's controller writes templates for it"
CLAIM_MAKER = "system:serviceaccount:kube-system:resource-claim-controller"


def enforced_policies(
    cluster: LocalCluster,
    release: str,
    driver_namespace: str,
    tenant: str,
    refused: dict[str, Any],
    values: dict[str, Any] | None = None,
) -> Iterator[str]:
    """The chart's policies installed with ``values`` until ``refused`` is refused in ``tenant``.

    Yields the controller's user name; removes the policies and both namespaces afterwards.
    """
    installed = install_chart_rbac(cluster, release=release, namespace=driver_namespace, values=values)
    cluster.create_namespace(tenant)
    wait_until(  # the policies load asynchronously
        f"the {release} policies enforced",
        lambda: admitted(cluster, refused) is not None,
        timeout=30,
        interval=0.2,
    )
    yield f"system:serviceaccount:{driver_namespace}:{installed.service_account('controller')}"
    installed.uninstall()
    for namespace in (driver_namespace, tenant):
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


@pytest.fixture(scope="module")
def policies(cluster: LocalCluster) -> Iterator[str]:
    """The chart's policies installed and enforced; the controller's user name; removed afterwards."""
    yield from enforced_policies(cluster, RELEASE, DRIVER_NAMESPACE, TENANT, daemon_claim(TENANT))


def admitted(cluster: LocalCluster, obj: dict[str, Any], *, as_user: str | None = None) -> str | None:
    """None when the API server admits ``obj`` (dry run, as ``as_user`` if given); else its error text."""
    impersonate = [f"--as={as_user}"] if as_user else []
    result = cluster.kubectl(
        *impersonate, "create", "--dry-run=server", "-f", "-", input=yaml.safe_dump(obj), check=False
    )
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


def isolated_claim(channel: int = 7) -> dict[str, Any]:
    """The isolated-channel DeviceClass narrowed to one number, as the controller's templates ask it."""
    selector = {"cel": {"expression": f'device.attributes["{DRIVER_NAME}"].id == {channel}'}}
    request = {"exactly": {"deviceClassName": DEVICE_CLASS_CHANNEL, "selectors": [selector]}}
    return claim(TENANT, request, "ComputeDomainChannelConfig", UID)


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
    ("isolated-class-claim", isolated_claim(), ISOLATED_CLAIM_REFUSED),
    ("isolated-class-template", template(isolated_claim()), ISOLATED_TEMPLATE_REFUSED),
    (
        "isolated-class-first-available",
        claim(TENANT, {"firstAvailable": [{"name": "a", "deviceClassName": DEVICE_CLASS_CHANNEL}]}, "X", UID),
        ISOLATED_CLAIM_REFUSED,
    ),
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
    cluster: LocalCluster, policies: str, obj: dict[str, Any], message: str
) -> None:
    """What only the driver's daemons may hold, or a domainID that is no UID: refused, saying why."""
    error = admitted(cluster, obj)
    assert error is not None, "admitted"
    assert message in error, error


@pytest.mark.parametrize("obj", [a[1] for a in ADMITTED], ids=[a[0] for a in ADMITTED])
def test_admitted(cluster: LocalCluster, policies: str, obj: dict[str, Any]) -> None:
    """Workload channel claims, the controller's daemon objects and other drivers' configs pass."""
    assert admitted(cluster, obj) is None


def test_isolated_channel_objects_come_only_from_their_makers(cluster: LocalCluster, policies: str) -> None:
    """The controller may write the isolated-channel template, the resourceclaim controller the claim."""
    assert admitted(cluster, template(isolated_claim()), as_user=policies) is None
    assert admitted(cluster, isolated_claim(), as_user=CLAIM_MAKER) is None


def test_a_tenant_cannot_repoint_the_controllers_template(cluster: LocalCluster, policies: str) -> None:
    """CREATE is the only check the policy needs: a claim template's spec cannot be changed afterwards."""
    made = template(isolated_claim())
    made["metadata"] = {"name": "made-by-controller", "namespace": TENANT}
    cluster.kubectl(f"--as={policies}", "create", "-f", "-", input=yaml.safe_dump(made))
    other = 'device.attributes["compute-domain.nvidia.com"].id == 8'
    patch = [
        {
            "op": "replace",
            "path": "/spec/spec/devices/requests/0/exactly/selectors/0/cel/expression",
            "value": other,
        }
    ]
    result = cluster.kubectl(
        "patch",
        "resourceclaimtemplate",
        "made-by-controller",
        "-n",
        TENANT,
        "--type=json",
        "-p",
        json.dumps(patch),
        "--dry-run=server",
        check=False,
    )
    assert result.returncode != 0 and "immutable" in result.stderr, result.stderr


# -- channelClaimsFromTemplatesOnly ----------------------------------------------------------------

STRICT_RELEASE = "tenantstrict"
STRICT_DRIVER_NAMESPACE = "tenantstrict-driver"
STRICT_TENANT = "tenantstrict-team"
STRICT_CLAIM_REFUSED = "On this cluster every IMEX channel claim is"
STRICT_TEMPLATE_REFUSED = "On this cluster the same holds for every IMEX channel template"


@pytest.fixture
def strict_policies(cluster: LocalCluster) -> Iterator[str]:
    """The policies with ``channelClaimsFromTemplatesOnly``; the controller's user name; then removed.

    Function-scoped: the policy judges every namespace but its driver's, so it must not outlive the test.
    """
    yield from enforced_policies(
        cluster,
        STRICT_RELEASE,
        STRICT_DRIVER_NAMESPACE,
        STRICT_TENANT,
        channel_claim(STRICT_TENANT),
        values={"validatingAdmissionPolicies": {"channelClaimsFromTemplatesOnly": True}},
    )


def test_with_templates_only_a_hand_written_channel_claim_is_refused(
    cluster: LocalCluster, strict_policies: str
) -> None:
    """No hand-written claim or template on the default channel class or with a channel config.

    Only the makers pass: the resourceclaim controller (a claim from a ComputeDomain's template) and
    imexdra's controller (the template), so no tenant can allocate a node's channel for a claim that
    can never be prepared (docs/tenancy.md, "No squatting").
    """
    by_config = claim(
        STRICT_TENANT, {"exactly": {"deviceClassName": "gpu.example.com"}}, "ComputeDomainChannelConfig", UID
    )
    for obj, refusal in (
        (channel_claim(STRICT_TENANT), STRICT_CLAIM_REFUSED),
        (by_config, STRICT_CLAIM_REFUSED),
        (template(channel_claim(STRICT_TENANT)), STRICT_TEMPLATE_REFUSED),
    ):
        error = admitted(cluster, obj)
        assert error is not None and refusal in error, error
    assert admitted(cluster, channel_claim(STRICT_TENANT), as_user=CLAIM_MAKER) is None
    assert admitted(cluster, template(channel_claim(STRICT_TENANT)), as_user=strict_policies) is None
    assert admitted(cluster, other_driver(by_config)) is None  # neither our class nor our config
