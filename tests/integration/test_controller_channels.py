"""Channel isolation in the controller's reconcile, against the real control plane.

Channel isolation is still refused at startup (docs/channel-isolation.md §10), so the controller runs
in-process here with its configuration built directly: host-managed, ``channel`` isolation, a pool of
three channels (numbers 1 and 2), authenticated as an account holding exactly the controller's RBAC
rules for that isolation (``imexdra.controller.rbac.cluster_rules``: ResourceClaims are read).

Aspects covered: domains get distinct numbers in ``status.channel`` with ``ChannelAllocated=True``
and become Ready with their template, which asks the channel class for that number only; a third
waits NotReady with ``ChannelsExhausted`` (condition and Warning event naming the holders) and no
template, and gets the number of a deleted domain once it is gone; ``All`` is refused with
``AllocationModeUnsupported``; switched back to ``domain`` isolation, a channel domain gets
``IsolationMismatch`` (number and template kept) and a new domain waits with
``IsolationSwitchPending`` until it is deleted, then becomes Ready as upstream's (no conditions);
switched to ``channel`` isolation, a domain with a channel 0 template is the mismatch and a new
domain gets its number only once it is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from imexdra.api.computedomain import ComputeDomain
from imexdra.api.constants import AllocationMode
from imexdra.api.featuregates import resolve_feature_gates
from imexdra.api.flags.common import ImexIsolation
from imexdra.api.imexmode import HOST_MANAGED_IMEX
from imexdra.common.kube.connection import connect
from imexdra.common.kube.kubeclient import KubeClient
from imexdra.common.machinery.events import EventRecorder
from imexdra.controller.config import CONTROLLER_NAME, ControllerConfig
from imexdra.controller.controller import Controller
from imexdra_sim.builders import compute_domain_model
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.integration.controller_harness import events_of, install_controller_identity, labelled
from tests.support.kubectl import get_json
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

SUFFIX = secrets.token_hex(3)
DRIVER_NS = f"imexdra-chan-{SUFFIX}"
USER_NS = f"cd-chan-{SUFFIX}"


def config_for(isolation: ImexIsolation) -> ControllerConfig:
    """Host-managed, with ``isolation`` and a pool of channels 0..2."""
    return ControllerConfig(
        driver_namespace=DRIVER_NS,
        managed_namespaces=(DRIVER_NS,),
        pod_name=f"controller-{isolation.value}",
        image_name="imexdra.test/unused:latest",
        image_pull_secrets=(),
        daemon_log_verbosity=0,
        max_nodes_per_imex_domain=18,
        feature_gates=resolve_feature_gates("HostManagedIMEX=true"),
        imex_mode=HOST_MANAGED_IMEX,
        imex_isolation=isolation,
        imex_channel_count=3,
    )


@pytest.fixture(scope="module")
def identities(cluster: LocalCluster, compute_domain_crds: None) -> Iterator[dict[ImexIsolation, Path]]:
    """The namespaces, and a kubeconfig per isolation for an account with exactly that RBAC."""
    cluster.create_namespace(DRIVER_NS)
    cluster.create_namespace(USER_NS)
    yield {
        isolation: install_controller_identity(
            cluster, DRIVER_NS, f"imexdra-controller-{isolation.value}", isolation=isolation
        )
        for isolation in ImexIsolation
    }
    cluster.kubectl("delete", "namespace", USER_NS, DRIVER_NS, "--wait=false")


@contextlib.asynccontextmanager
async def running(
    cluster: LocalCluster, kubeconfig: Path, isolation: ImexIsolation, *, clean_up: bool = True
) -> AsyncIterator[Controller]:
    """An in-process controller with ``isolation``; on exit (``clean_up``) it deletes every test domain."""
    config = config_for(isolation)
    connection = connect(kubeconfig)
    client = connection.kube(field_manager=CONTROLLER_NAME)
    controller = Controller(
        client, config, EventRecorder(client, controller=CONTROLLER_NAME, instance=config.pod_name)
    )
    task = asyncio.create_task(controller.run())
    try:
        await eventually("controller synced", controller.synced, within=30)
        yield controller
        if clean_up:
            # In a thread: the controller that removes the finalizers runs on this event loop.
            await asyncio.to_thread(
                cluster.kubectl, "delete", "computedomains", "--all", "-n", USER_NS, "--timeout=50s"
            )
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        client.close()


@pytest.fixture
async def controller(
    cluster: LocalCluster, identities: dict[ImexIsolation, Path]
) -> AsyncIterator[Controller]:
    """A channel-isolation controller over channels 0..2, as an account with only its RBAC rules."""
    async with running(cluster, identities[ImexIsolation.CHANNEL], ImexIsolation.CHANNEL) as controller:
        yield controller


def raw(cluster: LocalCluster, name: str) -> dict[str, Any]:
    return get_json(cluster, "computedomain", name, "-n", USER_NS)


def allocated(cluster: LocalCluster, name: str) -> dict[str, Any]:
    return next(c for c in raw(cluster, name)["status"]["conditions"] if c["type"] == "ChannelAllocated")


async def status_of(cluster: LocalCluster, name: str, wanted: str) -> dict[str, Any] | None:
    status: dict[str, Any] = raw(cluster, name).get("status") or {}
    return status if status.get("status") == wanted and status.get("conditions") else None


async def test_numbers_exhaustion_and_reuse(
    cluster: LocalCluster, kube: KubeClient, controller: Controller
) -> None:
    """Two domains get 1 and 2 and are Ready; a third waits exhausted, then takes a deleted one's number."""
    for name in ("first", "second"):
        await kube.create(compute_domain_model(name, USER_NS))
        await eventually(f"{name} Ready", lambda name=name: status_of(cluster, name, "Ready"), within=30)
    channels = {name: raw(cluster, name)["status"]["channel"] for name in ("first", "second")}
    assert sorted(channels.values()) == [1, 2]
    assert allocated(cluster, "first")["status"] == "True"
    first_uid = raw(cluster, "first")["metadata"]["uid"]
    (template,) = labelled(cluster, "resourceclaimtemplates", first_uid)
    assert template["metadata"]["name"] == "first-channel"
    assert template["spec"]["spec"]["devices"]["requests"] == [
        {
            "name": "channel",
            "exactly": {
                "allocationMode": "ExactCount",
                "count": 1,
                "deviceClassName": "compute-domain-channel.nvidia.com",
                "selectors": [
                    {
                        "cel": {
                            "expression": 'device.attributes["compute-domain.nvidia.com"].id == '
                            f"{channels['first']}"
                        }
                    }
                ],
            },
        }
    ]

    await kube.create(compute_domain_model("third", USER_NS))
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
    cluster: LocalCluster, kube: KubeClient, controller: Controller
) -> None:
    """allocationMode All: NotReady with AllocationModeUnsupported, no number and no template."""
    await kube.create(compute_domain_model("everything", USER_NS, mode=AllocationMode.ALL))
    status = await eventually("All refused", lambda: status_of(cluster, "everything", "NotReady"), within=30)
    assert "channel" not in status
    assert allocated(cluster, "everything")["reason"] == "AllocationModeUnsupported"
    uid = raw(cluster, "everything")["metadata"]["uid"]
    assert labelled(cluster, "resourceclaimtemplates", uid) == []


def condition(cluster: LocalCluster, name: str, reason: str) -> dict[str, Any] | None:
    """The domain's ChannelAllocated condition if it has ``reason``."""
    conditions = (raw(cluster, name).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "ChannelAllocated" and c["reason"] == reason), None)


async def test_switch_back_to_domain_isolation(
    cluster: LocalCluster, kube: KubeClient, identities: dict[ImexIsolation, Path]
) -> None:
    """Back to domain isolation: a channel domain is a mismatch and a new domain waits until it is gone."""
    async with running(cluster, identities[ImexIsolation.CHANNEL], ImexIsolation.CHANNEL, clean_up=False):
        await kube.create(compute_domain_model("before", USER_NS))
        await eventually("before Ready", lambda: status_of(cluster, "before", "Ready"), within=30)
    before = raw(cluster, "before")
    (template,) = labelled(cluster, "resourceclaimtemplates", before["metadata"]["uid"])

    async with running(cluster, identities[ImexIsolation.DOMAIN], ImexIsolation.DOMAIN):
        await eventually(
            "before mismatched", lambda: condition(cluster, "before", "IsolationMismatch"), within=30
        )
        status = raw(cluster, "before")["status"]
        assert (status["status"], status["channel"]) == ("NotReady", before["status"]["channel"])
        (kept,) = labelled(cluster, "resourceclaimtemplates", before["metadata"]["uid"])
        assert kept["metadata"]["resourceVersion"] == template["metadata"]["resourceVersion"]

        await kube.create(compute_domain_model("after", USER_NS))
        held = await eventually(
            "after held", lambda: condition(cluster, "after", "IsolationSwitchPending"), within=30
        )
        assert '1 ComputeDomain(s) made under isolation "channel" still live' in held["message"]
        after_uid = raw(cluster, "after")["metadata"]["uid"]
        assert raw(cluster, "after")["status"]["status"] == "NotReady"
        assert labelled(cluster, "resourceclaimtemplates", after_uid) == []

        await kube.delete(ComputeDomain, "before", namespace=USER_NS)

        def upstream_ready() -> dict[str, Any] | None:
            status: dict[str, Any] = raw(cluster, "after").get("status") or {}
            return status if status.get("status") == "Ready" and "conditions" not in status else None

        ready = await eventually("after Ready, as upstream", upstream_ready, within=40)
        assert "channel" not in ready
        (made,) = labelled(cluster, "resourceclaimtemplates", after_uid)
        (request,) = made["spec"]["spec"]["devices"]["requests"]
        assert request["exactly"]["deviceClassName"] == "compute-domain-default-channel.nvidia.com"


async def test_switch_to_channel_isolation(
    cluster: LocalCluster, kube: KubeClient, identities: dict[ImexIsolation, Path]
) -> None:
    """To channel isolation: a domain on channel 0 is a mismatch and a new domain waits until it is gone."""
    async with running(cluster, identities[ImexIsolation.DOMAIN], ImexIsolation.DOMAIN, clean_up=False):
        await kube.create(compute_domain_model("shared", USER_NS))

        def ready() -> dict[str, Any] | None:
            status: dict[str, Any] = raw(cluster, "shared").get("status") or {}
            return status if status.get("status") == "Ready" else None

        await eventually("shared Ready", ready, within=30)

    async with running(cluster, identities[ImexIsolation.CHANNEL], ImexIsolation.CHANNEL):
        await eventually(
            "shared mismatched", lambda: condition(cluster, "shared", "IsolationMismatch"), within=30
        )
        assert "channel" not in raw(cluster, "shared")["status"]
        await kube.create(compute_domain_model("isolated", USER_NS))
        await eventually(
            "isolated held", lambda: condition(cluster, "isolated", "IsolationSwitchPending"), within=30
        )
        isolated_uid = raw(cluster, "isolated")["metadata"]["uid"]
        assert labelled(cluster, "resourceclaimtemplates", isolated_uid) == []
        await kube.delete(ComputeDomain, "shared", namespace=USER_NS)
        ready_status = await eventually(
            "isolated Ready", lambda: status_of(cluster, "isolated", "Ready"), within=40
        )
        assert ready_status["channel"] in (1, 2)
        (made,) = labelled(cluster, "resourceclaimtemplates", isolated_uid)
        (request,) = made["spec"]["spec"]["devices"]["requests"]
        assert request["exactly"]["deviceClassName"] == "compute-domain-channel.nvidia.com"
