"""Channel isolation in the controller's reconcile, against the real control plane.

Channel isolation is still refused at startup (docs/channel-isolation.md §10), so the controller runs
in-process here with its configuration built directly: host-managed, ``channel`` isolation, a pool of
three channels (numbers 1 and 2). Aspects covered: domains get distinct numbers in ``status.channel``
with ``ChannelAllocated=True`` and become Ready with their template; a third waits NotReady with
``ChannelsExhausted`` (condition and Warning event naming the holders) and no template, and gets the
number of a deleted domain once it is gone; ``All`` is refused with ``AllocationModeUnsupported``.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest
from lightkube import AsyncClient

from imexdra.api.computedomain import ComputeDomain
from imexdra.api.config.common import ImexIsolation
from imexdra.api.constants import AllocationMode
from imexdra.api.featuregates import resolve_feature_gates
from imexdra.common.events import EventRecorder
from imexdra.common.kube import load_config, make_client
from imexdra.controller.config import CONTROLLER_NAME, ControllerConfig
from imexdra.controller.controller import Controller
from imexdra.controller.transport import Transport
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.integration.controller_harness import compute_domain, events_of, kubectl_json, labelled
from tests.integration.helpers import eventually

pytestmark = pytest.mark.integration

SUFFIX = secrets.token_hex(3)
DRIVER_NS = f"imexdra-chan-{SUFFIX}"
USER_NS = f"cd-chan-{SUFFIX}"


@pytest.fixture(scope="module")
async def controller(cluster: LocalCluster, compute_domain_crds: None) -> AsyncIterator[Controller]:
    """An in-process channel-isolation controller over a pool of channels 0..2."""
    cluster.create_namespace(DRIVER_NS)
    cluster.create_namespace(USER_NS)
    config = ControllerConfig(
        driver_namespace=DRIVER_NS,
        managed_namespaces=(DRIVER_NS,),
        pod_name="controller-channels",
        image_name="imexdra.test/unused:latest",
        image_pull_secrets=(),
        daemon_log_verbosity=0,
        max_nodes_per_imex_domain=18,
        feature_gates=resolve_feature_gates("HostManagedIMEX=true"),
        host_managed=True,
        imex_isolation=ImexIsolation.CHANNEL,
        imex_channel_count=3,
    )
    client = make_client(field_manager=CONTROLLER_NAME, kubeconfig=cluster.kubeconfig)
    transport = Transport(load_config(cluster.kubeconfig))
    controller = Controller(
        client,
        transport,
        config,
        EventRecorder(client, controller=CONTROLLER_NAME, instance="controller-channels"),
    )
    task = asyncio.create_task(controller.run())
    await eventually("controller synced", controller.synced, within=30)
    yield controller
    # In a thread: the controller that removes the finalizers runs on this event loop.
    await asyncio.to_thread(
        cluster.kubectl, "delete", "computedomains", "--all", "-n", USER_NS, "--timeout=50s"
    )
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    transport.close()
    await client.close()
    cluster.kubectl("delete", "namespace", USER_NS, DRIVER_NS, "--wait=false")


def raw(cluster: LocalCluster, name: str) -> dict[str, Any]:
    return kubectl_json(cluster, "computedomain", name, "-n", USER_NS)


def allocated(cluster: LocalCluster, name: str) -> dict[str, Any]:
    return next(c for c in raw(cluster, name)["status"]["conditions"] if c["type"] == "ChannelAllocated")


async def status_of(cluster: LocalCluster, name: str, wanted: str) -> dict[str, Any] | None:
    status: dict[str, Any] = raw(cluster, name).get("status") or {}
    return status if status.get("status") == wanted and status.get("conditions") else None


async def test_numbers_exhaustion_and_reuse(
    cluster: LocalCluster, kube: AsyncClient, controller: Controller
) -> None:
    """Two domains get 1 and 2 and are Ready; a third waits exhausted, then takes a deleted one's number."""
    for name in ("first", "second"):
        await kube.create(compute_domain(name, USER_NS))
        await eventually(f"{name} Ready", lambda name=name: status_of(cluster, name, "Ready"), within=30)
    channels = {name: raw(cluster, name)["status"]["channel"] for name in ("first", "second")}
    assert sorted(channels.values()) == [1, 2]
    assert allocated(cluster, "first")["status"] == "True"
    first_uid = raw(cluster, "first")["metadata"]["uid"]
    assert [t["metadata"]["name"] for t in labelled(cluster, "resourceclaimtemplates", first_uid)] == [
        "first-channel"
    ]

    await kube.create(compute_domain("third", USER_NS))
    waiting = await eventually("third exhausted", lambda: status_of(cluster, "third", "NotReady"), within=30)
    assert "channel" not in waiting
    condition = allocated(cluster, "third")
    assert (condition["status"], condition["reason"]) == ("False", "ChannelsExhausted")
    third_uid = raw(cluster, "third")["metadata"]["uid"]
    warning = await eventually(
        "ChannelsExhausted event",
        lambda: [e for e in events_of(cluster, USER_NS, third_uid) if e["reason"] == "ChannelsExhausted"],
        within=30,
    )
    assert f"{USER_NS}/first ({channels['first']})" in warning[0]["message"]
    assert labelled(cluster, "resourceclaimtemplates", third_uid) == []

    await kube.delete(ComputeDomain, "first", namespace=USER_NS)
    ready = await eventually("third Ready", lambda: status_of(cluster, "third", "Ready"), within=40)
    assert ready["channel"] == channels["first"]
    assert allocated(cluster, "third")["reason"] == "ChannelAllocated"


async def test_allocation_mode_all_is_refused(
    cluster: LocalCluster, kube: AsyncClient, controller: Controller
) -> None:
    """allocationMode All: NotReady with AllocationModeUnsupported, no number and no template."""
    await kube.create(compute_domain("everything", USER_NS, mode=AllocationMode.ALL))
    status = await eventually("All refused", lambda: status_of(cluster, "everything", "NotReady"), within=30)
    assert "channel" not in status
    assert allocated(cluster, "everything")["reason"] == "AllocationModeUnsupported"
    uid = raw(cluster, "everything")["metadata"]["uid"]
    assert labelled(cluster, "resourceclaimtemplates", uid) == []
