"""Upstream's test_cd_imex_chan_inject.bats and test_cd_misc.bats on a driver-managed simulated rack.

Covered (the scenarios that need no real GPU):

- channel injection, single: the workload container gets ``channel0`` through CDI; deletion completes;
- channel injection, ``allocationMode: All``: every one of the 2048 channels is injected;
- CD status cleanup and global CD status: ``status.nodes`` appears once the workload runs and the key
  is gone (not ``[]``) after it is deleted, while ``status.status`` goes NotReady with ``numNodes: 1``;
- an unknown field in a channel claim's opaque config fails Prepare permanently, visibly on the pod.

Upstream's test 3 also greps the daemon log for its self-removal; here the controller is the single
writer of membership (``imexdra.daemon.membership``), so the test checks the outcome in the API instead.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from imexdra.api.constants import DEVICE_CLASS_DEFAULT_CHANNEL, DRIVER_NAME
from imexdra_sim.builders import compute_domain
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.e2e.helpers import (
    CHANNEL_DEVICE_DIR,
    channel_pod,
    domain_status,
    fresh_namespace,
    injected_channel_devices,
    pod_exists,
    ready_pod,
)
from tests.events import driver_prepare_failure
from tests.support.kubectl import apply, get_json
from tests.support.waiting import wait_until

CHANNEL_COUNT = 2048


@pytest.fixture
def namespace(driver_managed_rack: LocalCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace per test, emptied afterwards."""
    yield from fresh_namespace(driver_managed_rack, request)


def test_channel_injection_single(driver_managed_rack: LocalCluster, namespace: str) -> None:
    """A channel-claim pod runs with channel0 injected, and deleting it completes."""
    cluster = driver_managed_rack
    apply(cluster, compute_domain("imex-channel-injection", namespace, "imex-channel-0"))
    apply(cluster, channel_pod("imex-channel-injection", namespace, "imex-channel-0"))
    pod = wait_until(
        "channel-injection pod Ready",
        lambda: ready_pod(cluster, namespace, "imex-channel-injection"),
        timeout=100,
    )
    assert injected_channel_devices(cluster, pod) == [f"{CHANNEL_DEVICE_DIR}/channel0"]

    cluster.kubectl("delete", "pod", "imex-channel-injection", "-n", namespace, "--wait=false")
    wait_until(
        "channel-injection pod gone", lambda: not pod_exists(cluster, namespace, "imex-channel-injection"), 30
    )


def test_channel_injection_all(driver_managed_rack: LocalCluster, namespace: str) -> None:
    """allocationMode All (driver-managed) injects all 2048 channels, channel222 and channel2047 included."""
    cluster = driver_managed_rack
    apply(cluster, compute_domain("imex-channel-injection-all", namespace, "ch-all", mode="All"))
    apply(cluster, channel_pod("imex-channel-injection-all", namespace, "ch-all"))
    pod = wait_until(
        "channel-injection-all pod Ready",
        lambda: ready_pod(cluster, namespace, "imex-channel-injection-all"),
        timeout=80,
    )
    devices = injected_channel_devices(cluster, pod)
    assert f"{CHANNEL_DEVICE_DIR}/channel2047" in devices
    assert f"{CHANNEL_DEVICE_DIR}/channel222" in devices
    assert sorted(devices) == sorted(f"{CHANNEL_DEVICE_DIR}/channel{n}" for n in range(CHANNEL_COUNT))

    cluster.kubectl("delete", "pod", "imex-channel-injection-all", "-n", namespace, "--wait=false")
    wait_until(
        "channel-injection-all pod gone",
        lambda: not pod_exists(cluster, namespace, "imex-channel-injection-all"),
        timeout=30,
    )


def test_domain_status_cleanup_after_workload_deletion(
    driver_managed_rack: LocalCluster, namespace: str
) -> None:
    """status.nodes lists the workload's node; after its deletion the key is absent and status NotReady."""
    cluster = driver_managed_rack
    domain = compute_domain("imex-channel-injection", namespace, "imex-channel-0")
    domain["spec"]["numNodes"] = 1
    apply(cluster, domain)
    apply(cluster, channel_pod("imex-channel-injection", namespace, "imex-channel-0"))
    pod = wait_until(
        "channel-injection pod Ready",
        lambda: ready_pod(cluster, namespace, "imex-channel-injection"),
        timeout=100,
    )
    status = wait_until(
        "ComputeDomain Ready with status.nodes",
        lambda: _status_if(cluster, namespace, lambda s: s.get("status") == "Ready" and "nodes" in s),
        timeout=30,
    )
    assert [node["name"] for node in status["nodes"]] == [pod["spec"]["nodeName"]]

    cluster.kubectl("delete", "pod", "imex-channel-injection", "-n", namespace, "--wait=true", timeout=60)
    status = wait_until(
        "ComputeDomain NotReady with no status.nodes key",
        lambda: _status_if(cluster, namespace, lambda s: s.get("status") == "NotReady" and "nodes" not in s),
        timeout=60,
    )
    assert "nodes" not in status, status


def test_unknown_field_in_opaque_channel_config_fails_prepare(
    driver_managed_rack: LocalCluster, namespace: str
) -> None:
    """An unknown field in a ComputeDomainChannelConfig is a permanent Prepare error shown on the pod."""
    cluster = driver_managed_rack
    apply(cluster, _claim_with_unknown_config_field("imex-channel-bad-config", namespace))
    pod = channel_pod("imex-channel-bad-config", namespace, template="unused")
    pod["spec"]["resourceClaims"] = [{"name": "imex-channel", "resourceClaimName": "imex-channel-bad-config"}]
    apply(cluster, pod)
    event = wait_until(
        "FailedPrepareDynamicResources event",
        lambda: driver_prepare_failure(cluster, namespace, "imex-channel-bad-config"),
        timeout=30,
    )
    assert "error preparing devices" in event["message"], event["message"]
    assert 'strict decoding error: unknown field "unexpectedField"' in event["message"], event["message"]

    def creating() -> dict[str, Any] | None:
        status: dict[str, Any] = get_json(cluster, "pod", "imex-channel-bad-config", "-n", namespace)[
            "status"
        ]
        reasons = [c["state"].get("waiting", {}).get("reason") for c in status.get("containerStatuses", [])]
        return status if reasons == ["ContainerCreating"] else None

    # The kubelet may write the container status just after the event.
    status = wait_until("container waiting in ContainerCreating", creating, timeout=10)
    assert status["phase"] == "Pending"


def _status_if(
    cluster: LocalCluster, namespace: str, wanted: Callable[[dict[str, Any]], bool]
) -> dict[str, Any] | None:
    """The domain's status when ``wanted`` holds for it, else None."""
    status = domain_status(cluster, namespace, "imex-channel-injection")
    return status if wanted(status) else None


def _claim_with_unknown_config_field(name: str, namespace: str) -> dict[str, Any]:
    """Upstream's bad-opaque-config claim: a channel config with ``unexpectedField: foo``."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "channel", "exactly": {"deviceClassName": DEVICE_CLASS_DEFAULT_CHANNEL}}
                ],
                "config": [
                    {
                        "requests": ["channel"],
                        "opaque": {
                            "driver": DRIVER_NAME,
                            "parameters": {
                                "apiVersion": "resource.nvidia.com/v1beta1",
                                "kind": "ComputeDomainChannelConfig",
                                # Upstream's test says "not-needed-for-test"; the chart's tenant
                                # policy refuses a domainID that is no UID (docs/tenancy.md).
                                "domainID": "00000000-0000-0000-0000-000000000000",
                                "unexpectedField": "foo",
                            },
                        },
                    }
                ],
            }
        },
    }
