"""The ComputeDomain CRDs and typed models against the real kube-apiserver.

Aspects covered: the CRDs install and become Established; a valid ComputeDomain is accepted and
defaulted; invalid values and any spec change are rejected by the apiserver (schema and CEL rule);
status is written only through the status subresource, with upstream's omit rules surviving the
round trip; list, watch and server-side apply work through the typed client and classes; cliques
round-trip; ``kubectl get`` shows our printer columns.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from imexdra.api.computedomain import (
    ComputeDomain,
    ComputeDomainChannelSpec,
    ComputeDomainNode,
    ComputeDomainSpec,
    ComputeDomainStatus,
    Condition,
    ResourceClaimTemplateReference,
)
from imexdra.api.computedomainclique import ComputeDomainClique, ComputeDomainDaemonInfo
from imexdra.api.constants import (
    COMPUTE_DOMAIN_LABEL_KEY,
    CRD_COMPUTE_DOMAIN_CLIQUES,
    CRD_COMPUTE_DOMAINS,
    AllocationMode,
    ComputeDomainStatusValue,
    ConditionStatus,
)
from imexdra.common.kube.api import ALL_NAMESPACES, PatchType
from imexdra.common.kube.client import ApiStatusError
from imexdra.common.kube.kubeclient import KubeClient, decode
from imexdra.common.kube.models.apiextensions_v1 import CustomResourceDefinition
from imexdra.common.kube.models.meta_v1 import ObjectMeta
from imexdra_sim.builders import compute_domain_model
from imexdra_sim.localcluster.cluster import LocalCluster

pytestmark = pytest.mark.integration

READY = ComputeDomainStatusValue.READY
NOT_READY = ComputeDomainStatusValue.NOT_READY


@pytest.fixture(scope="module")
def namespace(cluster: LocalCluster, compute_domain_crds: None) -> Iterator[str]:
    """The CRDs installed and Established, and a namespace of this module's own."""
    name = f"api-crds-{secrets.token_hex(3)}"
    cluster.kubectl("create", "namespace", name)
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false")


def manifest(name: str, namespace: str, spec: dict[str, Any]) -> str:
    return json.dumps(
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomain",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }
    )


def raw_object(cluster: LocalCluster, namespace: str, name: str) -> dict[str, Any]:
    result = cluster.kubectl("get", "computedomain", name, "-n", namespace, "-o", "json")
    obj: dict[str, Any] = json.loads(result.stdout)
    return obj


@pytest.mark.parametrize("crd", [CRD_COMPUTE_DOMAINS, CRD_COMPUTE_DOMAIN_CLIQUES], ids=["cd", "clique"])
async def test_crds_are_established(kube: KubeClient, namespace: str, crd: str) -> None:
    """Both CRDs are accepted by the apiserver: names accepted and Established."""
    installed = await kube.get(CustomResourceDefinition, crd)
    assert installed.status is not None
    conditions = {c.type: c.status for c in installed.status.conditions or []}
    assert conditions["NamesAccepted"] == "True"
    assert conditions["Established"] == "True"


async def test_valid_compute_domain_is_accepted_and_defaulted(kube: KubeClient, namespace: str) -> None:
    """A ComputeDomain with only the required fields is created; numNodes and allocationMode are defaulted."""
    created = await kube.create(compute_domain_model("defaults", namespace))
    assert isinstance(created, ComputeDomain)
    assert created.spec is not None
    assert created.spec.num_nodes == 0
    assert created.spec.channel.allocation_mode is AllocationMode.SINGLE
    assert created.spec.channel.resource_claim_template.name == "defaults-channel"
    assert created.metadata is not None and created.metadata.uid
    assert created.status is None
    fetched = await kube.get(ComputeDomain, "defaults", namespace=namespace)
    assert fetched.spec == created.spec


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"channel": {"resourceClaimTemplate": {"name": "t"}, "allocationMode": "Many"}},
            'spec.channel.allocationMode: Unsupported value: "Many"',
        ),
        (
            {"channel": {"resourceClaimTemplate": {"name": "t"}, "allocationMode": "single"}},
            'spec.channel.allocationMode: Unsupported value: "single"',
        ),
        (
            {"numNodes": -1, "channel": {"resourceClaimTemplate": {"name": "t"}}},
            "spec.numNodes in body should be greater than or equal to 0",
        ),
        ({"numNodes": "two", "channel": {"resourceClaimTemplate": {"name": "t"}}}, "spec.numNodes"),
        ({"numNodes": 1}, "spec.channel: Required value"),
        (
            {"channel": {"resourceClaimTemplate": {}}},
            "spec.channel.resourceClaimTemplate.name: Required value",
        ),
    ],
    ids=[
        "unknown-allocation-mode",
        "lowercase-allocation-mode",
        "negative-num-nodes",
        "string-num-nodes",
        "missing-channel",
        "missing-template-name",
    ],
)
def test_kubectl_create_rejects_invalid_spec(
    cluster: LocalCluster, namespace: str, spec: dict[str, Any], message: str
) -> None:
    """kubectl users get the apiserver's validation error for values the CRD forbids."""
    result = cluster.kubectl(
        "create", "-f", "-", check=False, input=manifest(f"invalid-{secrets.token_hex(3)}", namespace, spec)
    )
    assert result.returncode != 0
    assert message in result.stderr


@pytest.mark.parametrize(
    ("compute_domain", "message"),
    [
        (
            ComputeDomain(
                metadata=ObjectMeta(name="typed-bad-mode"),
                spec=ComputeDomainSpec(
                    channel=ComputeDomainChannelSpec(
                        resource_claim_template=ResourceClaimTemplateReference(name="t"),
                        allocation_mode="Many",  # type: ignore[arg-type]
                    )
                ),
            ),
            "Unsupported value",
        ),
        (
            ComputeDomain(
                metadata=ObjectMeta(name="typed-bad-count"),
                spec=ComputeDomainSpec(
                    num_nodes=-3,
                    channel=ComputeDomainChannelSpec(
                        resource_claim_template=ResourceClaimTemplateReference(name="t")
                    ),
                ),
            ),
            "greater than or equal to 0",
        ),
    ],
    ids=["allocation-mode", "num-nodes"],
)
async def test_typed_create_rejects_invalid_spec(
    kube: KubeClient, namespace: str, compute_domain: ComputeDomain, message: str
) -> None:
    """The typed client surfaces the apiserver's 422 for invalid values."""
    with pytest.raises(ApiStatusError) as caught:
        await kube.create(compute_domain, namespace=namespace)
    assert caught.value.code == 422
    assert message in str(caught.value)


@pytest.mark.parametrize(
    "change",
    [
        {"spec": {"numNodes": 3}},
        {"spec": {"channel": {"allocationMode": "All"}}},
        {"spec": {"channel": {"resourceClaimTemplate": {"name": "renamed"}}}},
    ],
    ids=["num-nodes", "allocation-mode", "template-name"],
)
async def test_spec_changes_are_rejected(kube: KubeClient, namespace: str, change: dict[str, Any]) -> None:
    """Any spec update fails the CEL rule with upstream's message; the stored spec is unchanged."""
    name = f"immutable-{secrets.token_hex(3)}"
    created = await kube.create(compute_domain_model(name, namespace))
    with pytest.raises(ApiStatusError) as caught:
        await kube.patch(ComputeDomain, name, change, namespace=namespace, patch_type=PatchType.MERGE)
    assert caught.value.code == 422
    assert "A computeDomain.spec is immutable" in str(caught.value)
    assert (await kube.get(ComputeDomain, name, namespace=namespace)).spec == created.spec


async def test_replace_with_changed_spec_is_rejected_but_metadata_may_change(
    kube: KubeClient, namespace: str
) -> None:
    """A PUT changing the spec is refused; one keeping it (defaults omitted) and adding a label is not."""
    name = f"replace-{secrets.token_hex(3)}"
    created = await kube.create(compute_domain_model(name, namespace))
    assert created.spec is not None and created.metadata is not None
    created.spec.num_nodes = 5
    with pytest.raises(ApiStatusError, match=r"A computeDomain\.spec is immutable"):
        await kube.replace(created)
    unchanged = await kube.get(ComputeDomain, name, namespace=namespace)
    assert unchanged.metadata is not None
    unchanged.metadata.labels = {"team": "a"}
    relabelled = await kube.replace(unchanged)
    assert relabelled.metadata is not None and relabelled.metadata.labels == {"team": "a"}


async def test_status_is_written_through_the_status_subresource(
    cluster: LocalCluster, kube: KubeClient, namespace: str
) -> None:
    """Status goes through /status only; index 0 and -1 survive, node status defaults, empty nodes vanish."""
    name = f"status-{secrets.token_hex(3)}"
    created = await kube.create(compute_domain_model(name, namespace, num_nodes=2))
    nodes = [
        ComputeDomainNode(name="node-0", ip_address="10.0.0.1", clique_id="uuid.1", index=0, status=READY),
        ComputeDomainNode(name="node-1", ip_address="10.0.0.2", clique_id="", index=-1),
    ]
    written = await kube.replace(created.status_update(ComputeDomainStatus(status=READY, nodes=nodes)))
    assert written.status == ComputeDomainStatus(status=READY, nodes=nodes)
    raw_nodes = raw_object(cluster, namespace, name)["status"]["nodes"]
    assert [node["index"] for node in raw_nodes] == [0, -1]
    assert [node["status"] for node in raw_nodes] == ["Ready", "NotReady"]

    # Status sent to the main resource is ignored by the apiserver.
    await kube.patch(
        ComputeDomain,
        name,
        {"status": {"status": "NotReady"}},
        namespace=namespace,
        patch_type=PatchType.MERGE,
    )
    assert (await kube.get(ComputeDomain, name, namespace=namespace)).status == ComputeDomainStatus(
        status=READY, nodes=nodes
    )

    patched = await kube.patch(
        ComputeDomain.Status,
        name,
        {"status": {"status": "NotReady"}},
        namespace=namespace,
        patch_type=PatchType.MERGE,
    )
    assert patched.status == ComputeDomainStatus(status=NOT_READY, nodes=nodes)

    current = await kube.get(ComputeDomain, name, namespace=namespace)
    await kube.replace(current.status_update(ComputeDomainStatus(status=NOT_READY)))
    assert "nodes" not in raw_object(cluster, namespace, name)["status"]
    assert (await kube.get(ComputeDomain.Status, name, namespace=namespace)).status == ComputeDomainStatus(
        status=NOT_READY
    )


async def test_channel_and_conditions_round_trip(
    cluster: LocalCluster, kube: KubeClient, namespace: str
) -> None:
    """status.channel and a ChannelAllocated condition are stored as sent; channel 0 is refused."""
    name = f"channel-{secrets.token_hex(3)}"
    created = await kube.create(compute_domain_model(name, namespace))
    condition = Condition(
        type="ChannelAllocated",
        status=ConditionStatus.TRUE,
        last_transition_time=datetime(2026, 11, 1, 10, 0, tzinfo=UTC),
        reason="Allocated",
        message="channel 5",
    )
    status = ComputeDomainStatus(status=NOT_READY, channel=5, conditions=[condition])
    written = await kube.replace(created.status_update(status))
    assert written.status == status
    assert raw_object(cluster, namespace, name)["status"]["conditions"][0]["lastTransitionTime"] == (
        "2026-11-01T10:00:00Z"
    )
    with pytest.raises(ApiStatusError) as caught:
        await kube.patch(
            ComputeDomain.Status,
            name,
            {"status": {"channel": 0}},
            namespace=namespace,
            patch_type=PatchType.MERGE,
        )
    assert caught.value.code == 422


async def test_invalid_status_is_rejected(kube: KubeClient, namespace: str) -> None:
    """The status subresource is validated too: an unknown status value is refused."""
    name = f"bad-status-{secrets.token_hex(3)}"
    await kube.create(compute_domain_model(name, namespace))
    with pytest.raises(ApiStatusError) as caught:
        await kube.patch(
            ComputeDomain.Status,
            name,
            {"status": {"status": "Bogus"}},
            namespace=namespace,
            patch_type=PatchType.MERGE,
        )
    assert caught.value.code == 422
    assert 'Unsupported value: "Bogus"' in str(caught.value)


async def test_stale_status_write_conflicts(kube: KubeClient, namespace: str) -> None:
    """A status replace from an outdated object fails with 409 (optimistic concurrency)."""
    name = f"conflict-{secrets.token_hex(3)}"
    stale = await kube.create(compute_domain_model(name, namespace))
    await kube.replace(stale.status_update(ComputeDomainStatus(status=READY)))
    with pytest.raises(ApiStatusError) as caught:
        await kube.replace(stale.status_update(ComputeDomainStatus(status=NOT_READY)))
    assert caught.value.code == 409


async def test_list_watch_and_apply(kube: KubeClient, namespace: str) -> None:
    """List (namespace and cluster wide), watch and server-side apply work with the typed class."""
    first = f"listed-{secrets.token_hex(3)}"
    await kube.create(compute_domain_model(first, namespace))
    listing = await kube.list_page(ComputeDomain, namespace=namespace)
    names = [cd.metadata.name for cd in listing.items if cd.metadata is not None]
    assert first in names
    everywhere = [cd async for cd in kube.list(ComputeDomain, namespace=ALL_NAMESPACES)]
    assert all(isinstance(cd, ComputeDomain) for cd in everywhere)

    applied_name = f"applied-{secrets.token_hex(3)}"

    async def first_added() -> ComputeDomain:
        async with kube.watch(
            ComputeDomain, namespace=namespace, resource_version=listing.resource_version
        ) as events:
            async for event in events:
                if event.type != "ADDED":
                    continue
                obj = decode(event, ComputeDomain)
                if obj.metadata is not None and obj.metadata.name == applied_name:
                    return obj
        raise AssertionError("watch ended")

    # The watch starts at the list's resourceVersion: it sees the apply whenever it connects.
    watcher = asyncio.create_task(first_added())
    applied = await kube.apply(compute_domain_model(applied_name, namespace, mode=AllocationMode.ALL))
    assert applied.spec is not None and applied.spec.channel.allocation_mode is AllocationMode.ALL
    async with asyncio.timeout(30):
        seen = await watcher
    assert isinstance(seen, ComputeDomain)
    assert seen.spec == applied.spec


async def test_clique_round_trip(cluster: LocalCluster, kube: KubeClient, namespace: str) -> None:
    """Cliques store their daemons (index kept, status defaulted); kubectl shows their ComputeDomain."""
    cd_uid = str(uuid.uuid4())
    name = f"{cd_uid}.cluster-uuid.1"
    daemons = [
        ComputeDomainDaemonInfo(
            node_name="node-0", ip_address="10.0.0.1", clique_id="cluster-uuid.1", index=0
        ),
        ComputeDomainDaemonInfo(
            node_name="node-1", ip_address="10.0.0.2", clique_id="cluster-uuid.1", index=1
        ),
    ]
    created = await kube.create(
        ComputeDomainClique(
            metadata=ObjectMeta(name=name, namespace=namespace, labels={COMPUTE_DOMAIN_LABEL_KEY: cd_uid}),
            daemons=daemons,
        )
    )
    assert created.daemons == daemons
    fetched = await kube.get(ComputeDomainClique, name, namespace=namespace)
    assert [d.status for d in fetched.daemons] == [NOT_READY, NOT_READY]
    table = cluster.kubectl("get", "computedomaincliques", name, "-n", namespace).stdout.splitlines()
    assert table[0].split() == ["NAME", "COMPUTEDOMAIN", "AGE"]
    assert table[1].split()[:2] == [name, cd_uid]


async def test_kubectl_get_shows_printer_columns(
    cluster: LocalCluster, kube: KubeClient, namespace: str
) -> None:
    """kubectl get computedomains shows status, channel, mode, numNodes and age; -o wide adds the template."""
    name = f"columns-{secrets.token_hex(3)}"
    created = await kube.create(compute_domain_model(name, namespace, mode=AllocationMode.ALL, num_nodes=2))
    await kube.replace(created.status_update(ComputeDomainStatus(status=READY)))
    table = cluster.kubectl("get", "computedomains", name, "-n", namespace).stdout.splitlines()
    assert table[0].split() == ["NAME", "STATUS", "CHANNEL", "MODE", "NUMNODES", "AGE"]
    # Under domain isolation the channel cell is empty.
    assert table[1].split()[:4] == [name, "Ready", "All", "2"]
    channel_at = table[0].index("CHANNEL")
    assert table[1][channel_at : table[0].index("MODE")].strip() == ""
    wide = cluster.kubectl("get", "computedomains", name, "-n", namespace, "-o", "wide").stdout.splitlines()
    assert wide[0].split() == ["NAME", "STATUS", "CHANNEL", "MODE", "NUMNODES", "TEMPLATE", "AGE"]
    assert wide[1].split()[4] == f"{name}-channel"
    await kube.patch(
        ComputeDomain.Status,
        name,
        {"status": {"channel": 7}},
        namespace=namespace,
        patch_type=PatchType.MERGE,
    )
    table = cluster.kubectl("get", "computedomains", name, "-n", namespace).stdout.splitlines()
    assert table[1].split()[:5] == [name, "Ready", "7", "All", "2"]
