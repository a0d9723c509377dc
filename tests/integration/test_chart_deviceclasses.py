"""The chart's DeviceClass CEL selectors, evaluated by the real kube-scheduler.

This test stands in for the kubelet plugin's node agent: it publishes a ResourceSlice for driver
``compute-domain.nvidia.com`` on node-1 with ``channel-0``, ``channel-1``, ``channel-2`` and
``daemon-0`` carrying upstream's attributes (``type``, ``id``). Pods claiming the chart's DeviceClasses
are scheduled; the claim status shows what the scheduler allocated: a channel claim gets ``channel-0``
(never ``daemon-0``, never another channel), a daemon claim gets ``daemon-0``. Channel isolation's
class (rendered past the being-built refusal) with the selector the controller writes into a domain's
template (``render.channel_selector``) gets exactly that channel, and never channel 0. No plugin
prepares the claims, so the pods stay ContainerCreating; only the allocation matters here.

The devices also carry a marker attribute that the claims select on as well, so that slices other
tests may have left on the shared cluster for the same driver cannot satisfy these claims.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from imexdra.api.constants import (
    DEVICE_CLASS_CHANNEL,
    DEVICE_CLASS_DAEMON,
    DEVICE_CLASS_DEFAULT_CHANNEL,
    DRIVER_NAME,
)
from imexdra.controller.render import channel_selector
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.support.kubectl import apply
from tests.support.waiting import eventually
from tests.unit.chart.helm import render

NAMESPACE = "chart-cel"
NODE = "node-1"
POOL = "chart-cel-node-1"
SLICE = "chart-cel-node-1"
MARKER_DOMAIN = "chart-cel.imexdra.dev"


def device(name: str, kind: str, index: int) -> dict[str, Any]:
    """A device as the plugin publishes it, plus the marker attribute."""
    return {
        "name": name,
        "attributes": {
            "type": {"string": kind},
            "id": {"int": index},
            f"{MARKER_DOMAIN}/marker": {"bool": True},
        },
    }


@pytest.fixture(scope="module")
def published(cluster: LocalCluster) -> Iterator[None]:
    """The chart's DeviceClasses (created if absent, removed only if created here) and the stand-in slice."""
    classes = render().of_kind("DeviceClass")
    assert {dc["metadata"]["name"] for dc in classes} == {DEVICE_CLASS_DEFAULT_CHANNEL, DEVICE_CLASS_DAEMON}
    channel_isolation = {
        "featureGates": {"HostManagedIMEX": True},
        "resources": {"computeDomains": {"imex": {"isolation": "channel"}}},
    }
    classes.append(render(channel_isolation).get("DeviceClass", DEVICE_CLASS_CHANNEL))
    existing = set(cluster.kubectl("get", "deviceclasses", "-o", "name").stdout.split())
    created = [
        dc for dc in classes if f"deviceclass.resource.k8s.io/{dc['metadata']['name']}" not in existing
    ]
    for dc in classes:
        # Whoever applied the class first, its selector must be the chart's exact one.
        if dc not in created:
            live = json.loads(
                cluster.kubectl("get", "deviceclass", dc["metadata"]["name"], "-o", "json").stdout
            )
            assert live["spec"]["selectors"] == dc["spec"]["selectors"]
    if created:
        apply(cluster, *created)
    apply(
        cluster,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": SLICE},
            "spec": {
                "driver": DRIVER_NAME,
                "nodeName": NODE,
                "pool": {"name": POOL, "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    device("channel-0", "channel", 0),
                    device("channel-1", "channel", 1),
                    device("channel-2", "channel", 2),
                    device("daemon-0", "daemon", 0),
                ],
            },
        },
    )
    cluster.create_namespace(NAMESPACE)
    yield
    cluster.kubectl("delete", "pods", "--all", "-n", NAMESPACE, "--grace-period=0", "--force", check=False)
    cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false", check=False)
    cluster.kubectl("delete", "resourceslice", SLICE, "--ignore-not-found", check=False)
    for dc in created:
        cluster.kubectl("delete", "deviceclass", dc["metadata"]["name"], "--ignore-not-found", check=False)


def claim_and_pod(name: str, device_class: str, channel: int | None = None) -> list[dict[str, Any]]:
    """A ResourceClaim for ``device_class`` (marker devices only; ``channel``: the controller's selector)."""
    marker = f"'marker' in device.attributes['{MARKER_DOMAIN}']"
    selectors = [{"cel": {"expression": marker}}]
    if channel is not None:
        selectors.append(channel_selector(channel).to_dict())
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "dev",
                            "exactly": {
                                "deviceClassName": device_class,
                                "selectors": selectors,
                            },
                        }
                    ]
                }
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": NODE},
                "automountServiceAccountToken": False,
                "resourceClaims": [{"name": "dev", "resourceClaimName": name}],
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.k8s.io/pause:3.10",
                        "resources": {"claims": [{"name": "dev"}]},
                    }
                ],
            },
        },
    ]


def allocation(cluster: LocalCluster, claim: str) -> list[tuple[str, str, str]] | None:
    """``(driver, pool, device)`` of each allocated result, or None while unallocated."""
    raw = cluster.kubectl("get", "resourceclaim", claim, "-n", NAMESPACE, "-o", "json").stdout
    results = json.loads(raw).get("status", {}).get("allocation", {}).get("devices", {}).get("results")
    return [(r["driver"], r["pool"], r["device"]) for r in results] if results else None


@pytest.fixture
def claims(cluster: LocalCluster, published: None) -> Iterator[Callable[..., None]]:
    """Create claim+pod pairs; afterwards delete them and wait until the devices are free again."""
    names: list[str] = []

    def create(name: str, device_class: str, channel: int | None = None) -> None:
        apply(cluster, *claim_and_pod(name, device_class, channel))
        names.append(name)

    yield create
    for name in names:
        cluster.kubectl("delete", "pod", name, "-n", NAMESPACE, "--grace-period=0", "--force", check=False)
    for name in names:
        cluster.kubectl("delete", "resourceclaim", name, "-n", NAMESPACE, "--timeout=60s", check=False)


@pytest.mark.parametrize(
    ("device_class", "device_name"),
    [
        pytest.param(DEVICE_CLASS_DEFAULT_CHANNEL, "channel-0", id="default-channel"),
        pytest.param(DEVICE_CLASS_DAEMON, "daemon-0", id="daemon"),
    ],
)
async def test_scheduler_allocates_the_device_the_class_selects(
    cluster: LocalCluster, claims: Callable[[str, str], None], device_class: str, device_name: str
) -> None:
    """The scheduler allocates exactly the selected device to a claim of each class."""
    claims("claim", device_class)
    allocated = await eventually("claim allocated", lambda: allocation(cluster, "claim"), within=60)
    assert allocated == [(DRIVER_NAME, POOL, device_name)]
    node = cluster.kubectl("get", "pod", "claim", "-n", NAMESPACE, "-o", "jsonpath={.spec.nodeName}").stdout
    assert node == NODE


def failed_scheduling(cluster: LocalCluster, pod: str) -> bool:
    """Whether the scheduler has reported ``pod`` unschedulable (a FailedScheduling event)."""
    events = cluster.kubectl(
        "get",
        "events",
        "-n",
        NAMESPACE,
        f"--field-selector=involvedObject.name={pod},reason=FailedScheduling",
        "-o",
        "json",
    ).stdout
    return bool(json.loads(events)["items"])


async def test_second_channel_claim_finds_no_other_channel(
    cluster: LocalCluster, claims: Callable[[str, str], None]
) -> None:
    """With channel-0 taken, a second channel claim stays unallocated: channel-1 and daemon-0 do not match."""
    claims("first-channel", DEVICE_CLASS_DEFAULT_CHANNEL)
    first = await eventually("first channel claim allocated", lambda: allocation(cluster, "first-channel"))
    assert first == [(DRIVER_NAME, POOL, "channel-0")]
    claims("second-channel", DEVICE_CLASS_DEFAULT_CHANNEL)
    await eventually(
        "second channel pod reported unschedulable",
        lambda: failed_scheduling(cluster, "second-channel"),
        within=60,
    )
    assert allocation(cluster, "second-channel") is None


async def test_channel_isolation_claim_gets_its_domains_channel(
    cluster: LocalCluster, claims: Callable[..., None]
) -> None:
    """The channel class plus the controller's selector for 2 gets channel-2; one for 0 gets nothing."""
    claims("own-channel", DEVICE_CLASS_CHANNEL, 2)
    allocated = await eventually(
        "own channel allocated", lambda: allocation(cluster, "own-channel"), within=60
    )
    assert allocated == [(DRIVER_NAME, POOL, "channel-2")]
    claims("channel-zero", DEVICE_CLASS_CHANNEL, 0)
    await eventually(
        "channel 0 through the channel class is unschedulable",
        lambda: failed_scheduling(cluster, "channel-zero"),
        within=60,
    )
    assert allocation(cluster, "channel-zero") is None
