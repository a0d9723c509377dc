"""The local cluster's DRA path end to end, with a test-only driver on a real kubelet."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from imexdra_sim.localcluster.cluster import LocalCluster
from tests.integration.testdriver import DRIVER, TestDriver, cdi_id
from tests.support.kubectl import apply, uid_of
from tests.support.waiting import eventually

NAMESPACE = "dra-path"


@pytest.fixture
async def driver(cluster: LocalCluster) -> AsyncIterator[TestDriver]:
    """The test driver registered with node-0's kubelet, its ResourceSlice published."""
    node = cluster.node("node-0")
    test_driver = TestDriver(node=node.name, registry_dir=node.registry_dir, plugins_dir=node.plugins_dir)
    await test_driver.start()
    await asyncio.wait_for(test_driver.registered.wait(), timeout=30)
    node_uid = cluster.kubectl("get", "node", node.name, "-o", "jsonpath={.metadata.uid}").stdout
    apply(
        cluster,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": DRIVER},
            "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {
                "name": f"{node.name}-{DRIVER}",
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node.name, "uid": node_uid}],
            },
            "spec": {
                "driver": DRIVER,
                "nodeName": node.name,
                "pool": {"name": node.name, "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": test_driver.device}],
            },
        },
    )
    cluster.create_namespace(NAMESPACE)
    yield test_driver
    cluster.kubectl("delete", "namespace", NAMESPACE, "--wait=false")
    cluster.kubectl("delete", "resourceslice", f"{node.name}-{DRIVER}", "--ignore-not-found")
    await test_driver.stop()


async def test_pod_with_claim_is_prepared_injected_and_unprepared(
    cluster: LocalCluster, driver: TestDriver
) -> None:
    """Scheduler allocates, kubelet prepares, runtime gets the CDI device, deletion unprepares."""
    assert driver.registrations[-1].plugin_registered
    apply(
        cluster,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "claim", "namespace": NAMESPACE},
            "spec": {"devices": {"requests": [{"name": "dev", "exactly": {"deviceClassName": DRIVER}}]}},
        },
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "consumer", "namespace": NAMESPACE},
            "spec": {
                "automountServiceAccountToken": False,
                "resourceClaims": [{"name": "dev", "resourceClaimName": "claim"}],
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.k8s.io/pause:3.10",
                        "resources": {"claims": [{"name": "dev"}]},
                    }
                ],
            },
        },
    )

    def phase() -> str:
        return cluster.kubectl(
            "get", "pod", "consumer", "-n", NAMESPACE, "-o", "jsonpath={.status.phase}"
        ).stdout

    await eventually("pod Running", lambda: phase() == "Running")
    claim = json.loads(cluster.kubectl("get", "resourceclaim", "claim", "-n", NAMESPACE, "-o", "json").stdout)
    claim_uid = claim["metadata"]["uid"]
    results = claim["status"]["allocation"]["devices"]["results"]
    assert [(r["driver"], r["pool"], r["device"]) for r in results] == [(DRIVER, "node-0", "dev-0")]
    assert driver.prepared == [claim_uid]
    pod_uid = uid_of(cluster, "pod", "consumer", NAMESPACE)
    creates = [r for r in cluster.node("node-0").cri_records("CreateContainer") if r["pod_uid"] == pod_uid]
    assert [r["cdi_devices"] for r in creates] == [[cdi_id("dev-0")]]

    cluster.kubectl("delete", "pod", "consumer", "-n", NAMESPACE, "--wait=false")
    await eventually("NodeUnprepareResources", lambda: driver.unprepared == [claim_uid])
