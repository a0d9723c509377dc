"""The controller's per-namespace bound (``--max-compute-domains-per-namespace``) on the real control plane.

The real ``compute-domain-controller`` binary runs host-managed, authenticated as a ServiceAccount
holding only the controller's RBAC, with a bound of 2 (docs/tenancy.md, "Quotas"). Aspects covered,
under ``channel`` isolation (a pool of channels 1..7) and under ``domain`` isolation: two domains of a
namespace are Ready; the third waits NotReady with ``ChannelAllocated=False`` and reason
``NamespaceQuotaExceeded``, no channel and no claim template, and a Warning event that gives the bound,
the namespace's count, what would work and the admitted domains of its own namespace only; another
namespace is not held back; once one of the two is deleted the third is admitted (under ``domain``
isolation its status is upstream's again, without conditions); the startup config line logs the
bound. After a restart with the bound lowered to 1, the admitted domains keep their objects and a new
one waits.
"""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from imexdra.api.computedomain import ComputeDomain
from imexdra.api.flags.common import ImexIsolation
from imexdra.common.kube.kubeclient import KubeClient
from imexdra_sim.builders import compute_domain_model
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.integration.controller_harness import controller_running, events_of, labelled
from tests.support.kubectl import get_json
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

SUFFIX = secrets.token_hex(3)
REASON = "NamespaceQuotaExceeded"


def arguments(isolation: ImexIsolation, bound: int) -> tuple[str, ...]:
    """The controller's flags for ``isolation`` and the bound (channels 1..7 under channel isolation)."""
    return (
        f"--imex-isolation={isolation.value}",
        "--imex-channel-count=8",
        f"--max-compute-domains-per-namespace={bound}",
    )


def raw(cluster: LocalCluster, namespace: str, name: str) -> dict[str, Any]:
    return get_json(cluster, "computedomain", name, "-n", namespace)


def ready(cluster: LocalCluster, namespace: str, name: str) -> dict[str, Any] | None:
    """The domain's status once it is Ready."""
    status: dict[str, Any] = raw(cluster, namespace, name).get("status") or {}
    return status if status.get("status") == "Ready" else None


def refused(cluster: LocalCluster, namespace: str, name: str) -> dict[str, Any] | None:
    """The domain's ``ChannelAllocated`` condition once it says ``NamespaceQuotaExceeded``."""
    conditions = (raw(cluster, namespace, name).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "ChannelAllocated" and c["reason"] == REASON), None)


def quota_events(cluster: LocalCluster, namespace: str, uid: str) -> list[dict[str, Any]]:
    return [e for e in events_of(cluster, namespace, uid) if e["reason"] == REASON]


def admitted_names(note: str) -> set[str]:
    """The domains a refusal's note names as admitted (domains made within a second may come in either
    order: their UIDs break the tie)."""
    return set(note.rpartition("; admitted: ")[2].split(", "))


async def create_ready(kube: KubeClient, cluster: LocalCluster, namespace: str, name: str) -> dict[str, Any]:
    await kube.create(compute_domain_model(name, namespace))
    status: dict[str, Any] = await eventually(
        f"{namespace}/{name} Ready", lambda: ready(cluster, namespace, name), within=30
    )
    return status


@pytest.mark.parametrize("isolation", list(ImexIsolation), ids=lambda i: i.value)
async def test_third_domain_waits_until_one_is_deleted(
    cluster: LocalCluster, kube: KubeClient, compute_domain_crds: None, isolation: ImexIsolation
) -> None:
    """Bound 2: the third domain of a namespace waits with no template or channel, then gets them."""
    driver_ns, team, other = (f"{p}-{isolation.value}-{SUFFIX}" for p in ("imexdra-quota", "team", "other"))
    async with controller_running(
        cluster,
        driver_ns,
        team,
        f"controller-quota-{isolation.value}-{SUFFIX}",
        gates="HostManagedIMEX=true",
        extra_args=arguments(isolation, 2),
    ) as process:
        config = next(e for e in process.log_events() if e.get("msg") == "controller manager config")
        assert config["maxComputeDomainsPerNamespace"] == 2
        cluster.create_namespace(other)
        first = await create_ready(kube, cluster, team, "first")
        await create_ready(kube, cluster, team, "second")
        if isolation is ImexIsolation.CHANNEL:
            assert first["channel"] in range(1, 8)

        await kube.create(compute_domain_model("third", team))
        condition = await eventually("third refused", lambda: refused(cluster, team, "third"), within=30)
        assert condition["status"] == "False"
        status = raw(cluster, team, "third")["status"]
        assert status["status"] == "NotReady"
        assert "channel" not in status
        third_uid = raw(cluster, team, "third")["metadata"]["uid"]
        assert labelled(cluster, "resourceclaimtemplates", third_uid) == []
        (event, *_) = await eventually(
            "NamespaceQuotaExceeded event", lambda: quota_events(cluster, team, third_uid), within=30
        )
        assert event["type"] == "Warning"
        note = event["message"]
        assert f"namespace {team} may have 2 ComputeDomain(s) admitted at once and has 3" in note
        assert "deleted or the cluster operator raises the bound" in note
        assert admitted_names(note) == {"first", "second"}, note

        # Another namespace is not held back, and the waiting domain's event never names its domains.
        await create_ready(kube, cluster, other, "elsewhere")
        assert all("elsewhere" not in e["message"] for e in quota_events(cluster, team, third_uid))

        await kube.delete(ComputeDomain, "first", namespace=team)
        admitted = await eventually("third Ready", lambda: ready(cluster, team, "third"), within=40)
        (template,) = labelled(cluster, "resourceclaimtemplates", third_uid)
        assert template["metadata"]["name"] == "third-channel"
        if isolation is ImexIsolation.CHANNEL:
            assert admitted["channel"] in range(1, 8)
            (allocated,) = admitted["conditions"]
            assert (allocated["status"], allocated["reason"]) == ("True", "ChannelAllocated")
        else:
            assert "conditions" not in admitted  # upstream's status once admitted
        cluster.kubectl("delete", "computedomains", "--all", "-n", other, "--timeout=60s")
    cluster.kubectl("delete", "namespace", other, "--wait=false")


async def test_lowered_bound_keeps_what_was_admitted(
    cluster: LocalCluster, kube: KubeClient, compute_domain_crds: None
) -> None:
    """Restarted with the bound lowered from 2 to 1: both admitted domains stay Ready, a new one waits."""
    driver_ns, team = f"imexdra-quota-low-{SUFFIX}", f"team-low-{SUFFIX}"
    async with controller_running(
        cluster,
        driver_ns,
        team,
        f"controller-quota-low-{SUFFIX}",
        gates="HostManagedIMEX=true",
        extra_args=arguments(ImexIsolation.CHANNEL, 2),
    ) as process:
        before = {name: await create_ready(kube, cluster, team, name) for name in ("alpha", "beta")}
        process.stop()
        process.extra_args = arguments(ImexIsolation.CHANNEL, 1)
        process.start()
        await process.wait_ready()

        await kube.create(compute_domain_model("new", team))
        condition = await eventually("new refused", lambda: refused(cluster, team, "new"), within=30)
        assert "may have 1 ComputeDomain(s) admitted at once and has 3" in condition["message"]
        new_uid = raw(cluster, team, "new")["metadata"]["uid"]
        (event, *_) = await eventually(
            "NamespaceQuotaExceeded event", lambda: quota_events(cluster, team, new_uid), within=30
        )
        assert admitted_names(event["message"]) == {"alpha", "beta"}
        for name, status in before.items():
            assert ready(cluster, team, name) == status, f"{name} changed after the restart"
