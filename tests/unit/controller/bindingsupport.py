"""Builders shared by the binding-conditions tests: pending claims, their node, cliques, the controller part.

``binding_setup`` is the controller's real caches under gate ComputeDomainBindingConditions holding one
domain of ``NS``, a ``BindingConditions`` on the in-memory writer seam and a clock set by hand.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from imexdra.api.computedomain import ComputeDomain
from imexdra.api.computedomainclique import ComputeDomainClique, ComputeDomainDaemonInfo
from imexdra.api.constants import COMPUTE_DOMAIN_LABEL_KEY, ComputeDomainStatusValue
from imexdra.common.kube.models.core_v1 import Node
from imexdra.common.kube.models.meta_v1 import ObjectMeta
from imexdra.common.kube.resource import decode_object
from imexdra.common.machinery.workqueue import WorkQueue
from imexdra.controller.binding import BindingConditions
from imexdra.controller.caches import Caches
from imexdra.controller.claimholds import ChannelClaim
from tests.support.apiwrites import FakeWrites
from tests.support.offline import offline_client
from tests.unit.controller.support import CLIQUE, UID, Events, fake_writes, make_config, make_domain

DRIVER = "compute-domain.nvidia.com"
NS = "team-a"
NODE = "node-a"
GATE = "ComputeDomainBindingConditions=true"
CLAIM = "worker-0-channel"


def claim_body(
    *,
    namespace: str = NS,
    domain: str = UID,
    binding: bool = True,
    conditions: list[dict[str, str]] | None = None,
    reserved_for: tuple[str, ...] = ("worker-0",),
    node: str = NODE,
    name: str = CLAIM,
    version: str = "7",
) -> bytes:
    """A claim allocated ``channel-0`` of ``node`` (with our binding condition unless ``binding=False``)."""
    result: dict[str, Any] = {"request": "channel", "driver": DRIVER, "pool": node, "device": "channel-0"}
    if binding:
        result |= {"bindingConditions": ["IMEXDaemonReady"], "bindingFailureConditions": ["IMEXDaemonFailed"]}
    parameters = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomainChannelConfig"}
    if domain:
        parameters["domainID"] = domain
    status: dict[str, Any] = {
        "allocation": {
            "devices": {
                "results": [result],
                "config": [{"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": parameters}}],
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        },
        "reservedFor": [{"resource": "pods", "name": pod, "uid": f"{pod}-uid"} for pod in reserved_for],
    }
    if conditions is not None:
        status["devices"] = [
            {"driver": DRIVER, "pool": node, "device": "channel-0", "conditions": conditions}
        ]
    obj = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "resourceVersion": version},
        "status": status,
    }
    return msgspec.json.encode(obj)


def decoded(body: bytes) -> ChannelClaim:
    """The claim as the controller's informer decodes it."""
    claim: ChannelClaim = decode_object(body, ChannelClaim)
    return claim


def labelled_node(uid: str = UID, name: str = NODE) -> Node:
    """``name`` labelled for domain ``uid``."""
    return Node(metadata=ObjectMeta(name=name, resourceVersion="3", labels={COMPUTE_DOMAIN_LABEL_KEY: uid}))


def clique(
    status: ComputeDomainStatusValue, *others: tuple[str, ComputeDomainStatusValue]
) -> ComputeDomainClique:
    """The domain's clique: ``NODE``'s daemon with ``status``, then each of ``others`` (node, status)."""
    entries = [(NODE, status), *others]
    daemons = [
        ComputeDomainDaemonInfo(
            node_name=node, ip_address=f"10.0.0.{index + 1}", clique_id=CLIQUE, index=index, status=state
        )
        for index, (node, state) in enumerate(entries)
    ]
    meta = ObjectMeta(name=f"{UID}.{CLIQUE}", namespace="nvidia-dra", labels={COMPUTE_DOMAIN_LABEL_KEY: UID})
    return ComputeDomainClique(metadata=meta, daemons=daemons)


@dataclass
class Setup:
    """One controller's binding part on its real caches."""

    caches: Caches
    writes: FakeWrites
    events: Events
    binding: BindingConditions
    domain: ComputeDomain
    #: The binding's monotonic clock, set by hand.
    clock: list[float]


async def binding_setup(tmp_path: Path) -> AsyncIterator[Setup]:
    """The controller's caches under the gate, holding one domain of ``NS`` and nothing else."""
    client = offline_client(tmp_path)
    caches = Caches(client, make_config(gates=GATE))
    cd = make_domain(namespace=NS)
    caches.domains.store.upsert(cd)
    writes, events, clock = fake_writes(caches), Events(), [0.0]
    binding = BindingConditions(
        caches,
        writes,  # type: ignore[arg-type]
        events,  # type: ignore[arg-type]
        runs_daemons=True,
        clock=lambda: clock[0],
    )
    yield Setup(caches, writes, events, binding, cd, clock)
    client.close()


async def drained(queue: WorkQueue[str]) -> set[str]:
    """Every item ready in ``queue``, taken out (each marked done)."""
    items: set[str] = set()
    while len(queue):
        item = await queue.get()
        queue.done(item)
        items.add(item)
    return items
