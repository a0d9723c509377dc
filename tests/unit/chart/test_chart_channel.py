"""The chart under ``imex.isolation=channel`` (docs/channel-isolation.md).

Aspects covered: the controller's RBAC gains exactly ``list``/``watch`` on ResourceClaims (and only
under channel isolation); ``channelCount`` reaches both binaries as ``IMEX_CHANNEL_COUNT`` and the
schema refuses counts without a channel to hand out or beyond the driver's limit; the DeviceClass
``compute-domain-channel.nvidia.com`` (channels 1 and up) ships only under channel isolation, next to
upstream's unchanged default-channel class.
"""

from __future__ import annotations

from typing import Any

import pytest

from imexdra.api.constants import DEVICE_CLASS_CHANNEL, DEVICE_CLASS_DEFAULT_CHANNEL
from tests.unit.chart import rbac
from tests.unit.chart.helm import NAMESPACE, merge, nested, render, render_error

HOST_MANAGED = {"featureGates": {"HostManagedIMEX": True}}
CHANNEL = merge(HOST_MANAGED, nested("resources.computeDomains.imex.isolation", "channel"))
CONTROLLER = ("Deployment", "compute-domain")
PLUGIN = ("DaemonSet", "compute-domains")

INSTALLS: dict[str, tuple[dict[str, Any], frozenset[str]]] = {
    "channel": (CHANNEL, frozenset({"claims"})),
    "channel-protection-off": (
        merge(CHANNEL, nested("resources.computeDomains.inUseProtection", False)),
        frozenset({"claims"}),
    ),
    "channel-leader-election": (
        merge(CHANNEL, {"controller": {"replicas": 2, "leaderElection": {"enabled": True}}}),
        frozenset({"claims", "leaderElection"}),
    ),
    "domain-host-managed": (HOST_MANAGED, frozenset({"claims"})),
}


@pytest.mark.parametrize("component", rbac.COMPONENTS)
@pytest.mark.parametrize(("values", "conditions"), INSTALLS.values(), ids=INSTALLS.keys())
def test_granted_equals_used(component: str, values: dict[str, Any], conditions: frozenset[str]) -> None:
    """Under either isolation each ServiceAccount is granted exactly what rbac-uses.yaml says it uses."""
    setup = rbac.Install(
        driver_namespace=NAMESPACE,
        managed_namespaces=(NAMESPACE,),
        base="imexdra-service-account",
        lease="imexdra-controller",
        conditions=conditions,
    )
    granted = rbac.granted(render(values), NAMESPACE, rbac.service_account(component, setup))
    expected = rbac.expected(component, setup)
    assert sorted(map(str, granted - expected)) == [], "granted but not used"
    assert sorted(map(str, expected - granted)) == [], "used but not granted"


def test_claims_are_read_under_channel_isolation_or_in_use_protection_only() -> None:
    """list/watch on ResourceClaims with channel isolation or in-use protection (default); neither: none."""
    account = "imexdra-service-account-controller"
    off = nested("resources.computeDomains.inUseProtection", False)

    def claim_verbs(values: dict[str, Any]) -> set[str]:
        granted = rbac.granted(render(values), NAMESPACE, account)
        return {p.verb for p in granted if p.resource == "resourceclaims"}

    assert claim_verbs(merge(CHANNEL, off)) == {"list", "watch"}
    assert claim_verbs(HOST_MANAGED) == {"list", "watch"}
    assert claim_verbs(merge(HOST_MANAGED, off)) == set()


@pytest.mark.parametrize("count", [2, 2048, 1048576], ids=["smallest", "default", "largest"])
def test_channel_count_reaches_both_binaries(count: int) -> None:
    """channelCount is IMEX_CHANNEL_COUNT of the controller and the plugin, as a plain integer."""
    rendered = render(merge(CHANNEL, nested("resources.computeDomains.imex.channelCount", count)))
    assert rendered.env(*CONTROLLER)["IMEX_CHANNEL_COUNT"] == str(count)
    assert rendered.env(*PLUGIN)["IMEX_CHANNEL_COUNT"] == str(count)


@pytest.mark.parametrize(
    ("count", "fragment"),
    [
        (1, "minimum: got 1, want 2"),
        (0, "minimum: got 0, want 2"),
        (1048577, "maximum: got 1.048577"),
        ("2048", "got string, want integer"),
    ],
    ids=["only-channel-0", "zero", "beyond-20-bit-minor", "string"],
)
def test_channel_count_out_of_range_is_refused(count: Any, fragment: str) -> None:
    """A channel count with no channel to hand out, or beyond the driver's limit, fails the install."""
    error = render_error(nested("resources.computeDomains.imex.channelCount", count))
    assert "channelCount" in error
    assert fragment in error


CHANNELS_CEL = (
    "device.driver == 'compute-domain.nvidia.com' && "
    "device.attributes['compute-domain.nvidia.com'].type == 'channel' && "
    "device.attributes['compute-domain.nvidia.com'].id >= 1"
)


def test_channel_device_class_ships_under_channel_isolation() -> None:
    """Channel isolation: the channel class selects channels >= 1; upstream's channel 0 class stays."""
    rendered = render(CHANNEL)
    assert {dc["metadata"]["name"] for dc in rendered.of_kind("DeviceClass")} == {
        DEVICE_CLASS_CHANNEL,
        DEVICE_CLASS_DEFAULT_CHANNEL,
    }
    device_class = rendered.get("DeviceClass", DEVICE_CLASS_CHANNEL)
    assert device_class["apiVersion"] == "resource.k8s.io/v1"
    assert device_class["spec"] == {"selectors": [{"cel": {"expression": CHANNELS_CEL}}]}
    assert device_class["metadata"]["labels"]["app.kubernetes.io/instance"] == "imexdra"


@pytest.mark.parametrize(
    "values",
    [{}, HOST_MANAGED, nested("resources.computeDomains.imex.isolation", "domain")],
    ids=["defaults", "host-managed", "explicit-domain"],
)
def test_no_channel_device_class_under_domain_isolation(values: dict[str, Any]) -> None:
    """Domain isolation installs upstream's classes only."""
    names = {dc["metadata"]["name"] for dc in render(values).of_kind("DeviceClass")}
    assert DEVICE_CLASS_CHANNEL not in names
    assert DEVICE_CLASS_DEFAULT_CHANNEL in names
