"""Binding conditions: which change requeues which pending claim, and what one decision reads and writes.

docs/binding-conditions.md, "Cost". Aspects covered, on the controller's real caches with watch events
handed to its informers: a daemon pod's change requeues the claims of its own node only; a clique's or
the domain's ``status.nodes`` change, those of the nodes whose entry changed (none on a resync); the
domain's deletion, every claim of it; a decision decodes only its node's daemon pod, none once the node
is Ready; a claim is patched once per resourceVersion, again only when the watch shows a newer one.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from imexdra.api.computedomain import ComputeDomainNode, ComputeDomainStatus
from imexdra.api.constants import ComputeDomainStatusValue
from imexdra.controller import caches as caches_module
from imexdra.controller.daemons import DaemonPod
from tests.unit.controller.bindingsupport import (
    NODE,
    NS,
    Setup,
    binding_setup,
    claim_body,
    clique,
    decoded,
    drained,
    labelled_node,
)
from tests.unit.controller.support import CLIQUE, deliver, make_pod

READY = ComputeDomainStatusValue.READY
NOT_READY = ComputeDomainStatusValue.NOT_READY
OTHER = "node-b"
CLAIM_A = f"claim:{NS}/a-channel"
CLAIM_B = f"claim:{NS}/b-channel"


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[Setup]:
    """The binding part holding one pending claim of the domain on ``NODE`` and one on ``OTHER``."""
    async for built in binding_setup(tmp_path):
        assert built.caches.claims is not None
        built.caches.claims.store.upsert(decoded(claim_body(node=NODE, name="a-channel")))
        built.caches.claims.store.upsert(decoded(claim_body(node=OTHER, name="b-channel")))
        yield built


def daemon(node: str, version: str, *, ready: bool = False) -> Any:
    """The domain's daemon pod on ``node`` at ``version``."""
    pod = make_pod(node=node, ready=ready, name=f"daemon-{node}")
    pod.metadata.resourceVersion = version
    return pod


async def test_a_daemon_pod_change_requeues_only_its_nodes_claims(setup: Setup) -> None:
    """A daemon pod appearing, changing or going on node A brings back A's claim, never B's."""
    pods = setup.caches.pods[0]
    deliver(pods, "ADDED", daemon(NODE, "10"))
    assert await drained(setup.binding.queue) == {CLAIM_A}
    deliver(pods, "MODIFIED", daemon(NODE, "11", ready=True))
    assert await drained(setup.binding.queue) == {CLAIM_A}
    deliver(pods, "DELETED", daemon(NODE, "12", ready=True))
    assert await drained(setup.binding.queue) == {CLAIM_A}
    deliver(pods, "ADDED", daemon(OTHER, "13"))
    assert await drained(setup.binding.queue) == {CLAIM_B}


async def test_a_clique_change_requeues_only_the_nodes_whose_entry_changed(setup: Setup) -> None:
    """New clique: both nodes; A turns Ready: A alone; B's address moves, or a resync: nobody."""
    cliques = setup.caches.cliques
    assert cliques is not None
    both = clique(NOT_READY, (OTHER, NOT_READY))
    assert both.metadata is not None
    both.metadata.resourceVersion = "20"
    deliver(cliques, "ADDED", both)
    assert await drained(setup.binding.queue) == {CLAIM_A, CLAIM_B}
    a_ready = clique(READY, (OTHER, NOT_READY))
    assert a_ready.metadata is not None
    a_ready.metadata.resourceVersion = "21"
    deliver(cliques, "MODIFIED", a_ready)
    assert await drained(setup.binding.queue) == {CLAIM_A}
    moved = msgspec.structs.replace(
        a_ready, metadata=msgspec.structs.replace(a_ready.metadata, resourceVersion="22")
    )
    moved.daemons[1].ip_address = "10.0.9.9"
    deliver(cliques, "MODIFIED", moved)
    assert await drained(setup.binding.queue) == set()
    deliver(cliques, "DELETED", moved)
    assert await drained(setup.binding.queue) == {CLAIM_A, CLAIM_B}


def with_status(setup: Setup, version: str, *entries: tuple[str, ComputeDomainStatusValue]) -> Any:
    """The setup's domain at ``version``, its ``status.nodes`` listing ``entries`` (node, status)."""
    nodes = [
        ComputeDomainNode(name=node, ip_address="10.0.0.1", clique_id=CLIQUE, status=s) for node, s in entries
    ]
    cd = msgspec.structs.replace(setup.domain, status=ComputeDomainStatus(status=NOT_READY, nodes=nodes))
    assert cd.metadata is not None
    cd.metadata = msgspec.structs.replace(cd.metadata, resourceVersion=version)
    return cd


async def test_a_domain_change_requeues_the_nodes_whose_status_entry_changed(setup: Setup) -> None:
    """B's ``status.nodes`` entry turns Ready: B alone; the domain starts terminating, then goes: both."""
    domains = setup.caches.domains
    deliver(domains, "MODIFIED", with_status(setup, "30", (NODE, NOT_READY), (OTHER, NOT_READY)))
    assert await drained(setup.binding.queue) == {CLAIM_A, CLAIM_B}
    deliver(domains, "MODIFIED", with_status(setup, "31", (NODE, NOT_READY), (OTHER, READY)))
    assert await drained(setup.binding.queue) == {CLAIM_B}
    same = with_status(setup, "32", (NODE, NOT_READY), (OTHER, READY))
    deliver(domains, "MODIFIED", same)  # e.g. a condition changed: no node's entry did
    assert await drained(setup.binding.queue) == set()
    terminating = with_status(setup, "33", (NODE, NOT_READY), (OTHER, READY))
    terminating.metadata.deletionTimestamp = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    deliver(domains, "MODIFIED", terminating)
    assert await drained(setup.binding.queue) == {CLAIM_A, CLAIM_B}
    deliver(domains, "DELETED", terminating)
    assert await drained(setup.binding.queue) == {CLAIM_A, CLAIM_B}


@pytest.fixture
def decoded_pods(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the daemon pods the caches decode from here on (calls pass through unchanged)."""
    names: list[str] = []
    real: Callable[[Any], DaemonPod | None] = caches_module.daemon_pod

    def counting(pod: Any) -> DaemonPod | None:
        names.append(pod.metadata.name)
        return real(pod)

    monkeypatch.setattr(caches_module, "daemon_pod", counting)
    return names


async def test_a_decision_reads_only_its_nodes_daemon_pod(setup: Setup, decoded_pods: list[str]) -> None:
    """With daemons on 32 nodes, A's decision decodes A's pod alone, and no pod once A is Ready."""
    caches = setup.caches
    assert caches.nodes is not None and caches.cliques is not None
    caches.nodes.store.upsert(labelled_node())
    for index in range(32):
        node = NODE if index == 0 else f"node-{index:02d}"
        caches.pods[0].store.upsert(daemon(node, str(40 + index)))
    caches.cliques.store.upsert(clique(NOT_READY))
    await setup.binding.process(CLAIM_A)
    assert decoded_pods == [f"daemon-{NODE}"] and setup.writes.conditions == []
    decoded_pods.clear()
    caches.cliques.store.upsert(clique(READY))
    await setup.binding.process(CLAIM_A)
    assert decoded_pods == [] and setup.writes.conditions == [
        (f"{NS}/a-channel", "IMEXDaemonReady", "DaemonReady")
    ]


async def test_a_claim_is_patched_once_per_resource_version(setup: Setup) -> None:
    """A requeue before the watch shows our patch writes nothing; a newer, still pending version does."""
    caches = setup.caches
    assert caches.nodes is not None and caches.cliques is not None and caches.claims is not None
    caches.nodes.store.upsert(labelled_node())
    caches.cliques.store.upsert(clique(READY))
    await setup.binding.process(CLAIM_A)
    await setup.binding.process(CLAIM_A)  # e.g. the domain's status turned A Ready too
    ready = (f"{NS}/a-channel", "IMEXDaemonReady", "DaemonReady")
    assert setup.writes.conditions == [ready]
    deliver(caches.claims, "MODIFIED", claim_body(node=NODE, name="a-channel", version="8"))
    assert await drained(setup.binding.queue) == {CLAIM_A}
    await setup.binding.process(CLAIM_A)
    assert setup.writes.conditions == [ready, ready]
