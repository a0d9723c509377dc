"""Binding conditions of our channel devices: the claim projection, ``decide`` and the controller's part.

docs/binding-conditions.md. Aspects covered: a claim allocated a channel with our binding condition
decodes into a ``PendingBinding`` (node from the allocation's node selector) until either condition is
True in ``status.devices``; ``decide`` fails a claim with no channel config, naming a domain of another
namespace or a terminating one, or allocated on a node of another domain, labels an unlabelled node,
waits for, then reports, the node's daemon Ready; ``BindingConditions`` on the controller's real caches
(filled by hand, a recording writer) writes exactly that, and takes back a label no claim needs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from imexdra.api.constants import ComputeDomainStatusValue
from imexdra.common.kube.models.core_v1 import ContainerState, ContainerStateTerminated, ContainerStatus
from imexdra.controller.binding import FAILING_GRACE_SECONDS, Facts, Outcome, decide
from imexdra.controller.claimholds import PendingBinding
from tests.unit.controller.bindingsupport import (
    NODE,
    NS,
    Setup,
    binding_setup,
    claim_body,
    clique,
    decoded,
    labelled_node,
)
from tests.unit.controller.support import UID, make_domain, make_pod

PENDING = PendingBinding(domain=UID, node=NODE, devices=((NODE, "channel-0"),))


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param(claim_body(), PENDING, id="pending"),
        pytest.param(claim_body(domain=""), PendingBinding("", NODE, ((NODE, "channel-0"),)), id="no-domain"),
        pytest.param(claim_body(binding=False), None, id="no-binding-condition"),
        pytest.param(
            claim_body(conditions=[{"type": "IMEXDaemonReady", "status": "True"}]), None, id="already-ready"
        ),
        pytest.param(
            claim_body(conditions=[{"type": "IMEXDaemonFailed", "status": "True"}]), None, id="already-failed"
        ),
        pytest.param(
            claim_body(conditions=[{"type": "IMEXDaemonReady", "status": "False"}]),
            PendingBinding(UID, NODE, ((NODE, "channel-0"),), has_device_statuses=True),
            id="ready-false",
        ),
    ],
)
def test_claim_decodes_into_its_pending_binding(body: bytes, expected: PendingBinding | None) -> None:
    """A binding is pending until one of our two conditions is True for every such device."""
    assert decoded(body).binding == expected


def test_a_channel_use_knows_its_allocated_node() -> None:
    """``ClaimUse.node`` is the node the allocation's selector names (for taking a label back)."""
    use = decoded(claim_body()).use
    assert use is not None and (use.domain, use.node, use.pods) == (UID, NODE, (f"{NS}/worker-0",))


def facts(**overrides: Any) -> Facts:
    values: dict[str, Any] = {
        "claim_namespace": NS,
        "runs_daemons": True,
        "domain": make_domain(namespace=NS),
        "terminating": False,
        "node_label": UID,
        "daemon_ready": False,
        "daemon_failure": "",
    }
    return Facts(**(values | overrides))


@pytest.mark.parametrize(
    ("binding", "given", "outcome", "reason"),
    [
        (PendingBinding("", NODE, ()), facts(), Outcome.FAIL, "NoComputeDomainConfig"),
        (PENDING, facts(domain=None), Outcome.FAIL, "ComputeDomainNotFound"),
        (PENDING, facts(terminating=True), Outcome.FAIL, "ComputeDomainTerminating"),
        (PENDING, facts(node_label=None), Outcome.LABEL, ""),
        (PENDING, facts(node_label="another-uid"), Outcome.FAIL, "NodeInUse"),
        (PENDING, facts(), Outcome.WAIT, ""),
        (PENDING, facts(daemon_ready=True), Outcome.READY, "DaemonReady"),
        (PENDING, facts(daemon_failure="NV_ERR_IN_USE"), Outcome.FAIL, "DaemonFailing"),
        (PENDING, facts(runs_daemons=False, node_label=None), Outcome.READY, "ComputeDomainFound"),
        (PENDING, facts(runs_daemons=False, domain=None), Outcome.FAIL, "ComputeDomainNotFound"),
    ],
    ids=[
        "no-config",
        "not-found",
        "terminating",
        "unlabelled",
        "node-in-use",
        "wait",
        "ready",
        "failing",
        "host-managed-own-namespace",
        "host-managed-not-found",
    ],
)
def test_decide(binding: PendingBinding, given: Facts, outcome: Outcome, reason: str) -> None:
    """Namespace first, then the node's label, then the daemon's readiness or lasting failure."""
    decision = decide(binding, given)
    assert (decision.outcome, decision.reason) == (outcome, reason)


def test_failure_messages_name_nothing_of_another_domain() -> None:
    """A node of another domain is refused without its UID; a missing domain names the claim's namespace."""
    in_use = decide(PENDING, facts(node_label="another-uid"))
    assert "another-uid" not in in_use.message
    missing = decide(PENDING, facts(domain=None))
    assert f"namespace {NS}" in missing.message


@pytest.fixture
async def setup(tmp_path: Path) -> AsyncIterator[Setup]:
    """The controller's caches under the gate, holding one domain of team-a and nothing else."""
    async for built in binding_setup(tmp_path):
        yield built


async def decide_claim(setup: Setup, body: bytes) -> None:
    claim = decoded(body)
    assert setup.caches.claims is not None
    setup.caches.claims.store.upsert(claim)
    await setup.binding.process(f"claim:{claim.metadata.namespace}/{claim.metadata.name}")  # type: ignore[union-attr]


async def test_a_claim_of_another_namespace_fails_at_once_without_a_label(setup: Setup) -> None:
    """A claim naming team-a's domain from another namespace: failure condition and events, no label."""
    await decide_claim(setup, claim_body(namespace="tenant"))
    assert setup.writes.conditions == [
        ("tenant/worker-0-channel", "IMEXDaemonFailed", "ComputeDomainNotFound")
    ]
    assert "add_node_label" not in setup.writes.verbs()
    assert setup.events.subjects() == [
        ("ResourceClaim", "tenant", "ComputeDomainNotFound"),
        ("Pod", "tenant", "ComputeDomainNotFound"),
    ]


async def test_an_unlabelled_node_is_labelled_and_the_claim_waits(setup: Setup) -> None:
    """The first step for the domain's own claim is its node's label; no condition yet."""
    await decide_claim(setup, claim_body())
    assert setup.writes.log == [("add_node_label", NODE)] and setup.writes.node_labels == {NODE: UID}
    assert setup.writes.conditions == []


async def test_a_node_found_labelled_for_another_domain_fails(setup: Setup) -> None:
    """The label write finds another domain's label (the cache lagged): failure, the pod goes elsewhere."""
    setup.writes.node_labels[NODE] = "another-uid"
    await decide_claim(setup, claim_body())
    assert setup.writes.conditions == [("team-a/worker-0-channel", "IMEXDaemonFailed", "NodeInUse")]


async def test_a_node_gone_before_its_label_fails(setup: Setup) -> None:
    """The allocated node is deleted before the controller labels it: failure, the pod goes elsewhere."""
    setup.writes.gone_nodes.add(NODE)
    await decide_claim(setup, claim_body())
    assert setup.writes.conditions == [("team-a/worker-0-channel", "IMEXDaemonFailed", "NodeNotFound")]


async def test_ready_once_the_nodes_daemon_is_ready_in_its_clique(setup: Setup) -> None:
    """Labelled node, daemon NotReady: wait; the clique says Ready: the Ready condition, nothing else."""
    caches = setup.caches
    assert caches.nodes is not None and caches.cliques is not None
    caches.nodes.store.upsert(labelled_node())
    caches.cliques.store.upsert(clique(ComputeDomainStatusValue.NOT_READY))
    await decide_claim(setup, claim_body())
    assert setup.writes.conditions == []
    caches.cliques.store.upsert(clique(ComputeDomainStatusValue.READY))
    await decide_claim(setup, claim_body())
    assert setup.writes.conditions == [("team-a/worker-0-channel", "IMEXDaemonReady", "DaemonReady")]
    assert "add_node_label" not in setup.writes.verbs()
    assert setup.events.recorded == []


async def test_a_label_is_released_only_when_no_claim_of_the_domain_needs_it(setup: Setup) -> None:
    """The domain's claim on the node keeps its label; a foreign one does not; none left: removed."""
    caches = setup.caches
    assert caches.nodes is not None and caches.claims is not None
    caches.nodes.store.upsert(labelled_node())
    setup.writes.node_labels[NODE] = UID
    caches.claims.store.upsert(decoded(claim_body()))
    await setup.binding.process(f"label:{NODE}/{UID}")
    assert "remove_node_label" not in setup.writes.verbs()
    caches.claims.store.delete(f"{NS}/worker-0-channel")
    caches.claims.store.upsert(decoded(claim_body(namespace="tenant")))
    await setup.binding.process(f"label:{NODE}/{UID}")
    assert setup.writes.log == [("remove_node_label", NODE)] and setup.writes.node_labels == {}


async def test_a_label_of_another_domain_is_never_released(setup: Setup) -> None:
    """Only a label naming the domain in question is taken back."""
    assert setup.caches.nodes is not None
    setup.caches.nodes.store.upsert(labelled_node("another-uid"))
    await setup.binding.process(f"label:{NODE}/{UID}")
    assert "remove_node_label" not in setup.writes.verbs()


def crashing_daemon() -> Any:
    """The domain's daemon pod on ``NODE``, not Ready, its container's last run exited 1."""
    pod = make_pod(node=NODE, ready=False, name="daemon-a")
    terminated = ContainerStateTerminated(exitCode=1, reason="Error")
    pod.status.containerStatuses = [  # type: ignore[union-attr]
        ContainerStatus(
            name="compute-domain-daemon",
            image="imexdra",
            imageID="",
            ready=False,
            restartCount=1,
            lastState=ContainerState(terminated=terminated),
        )
    ]
    return pod


async def test_a_daemon_failing_for_the_grace_period_fails_the_binding(setup: Setup) -> None:
    """A crash is waited on for FAILING_GRACE_SECONDS (the claim rechecked when it ends), then it fails."""
    caches = setup.caches
    assert caches.nodes is not None
    caches.nodes.store.upsert(labelled_node())
    caches.pods[0].store.upsert(crashing_daemon())
    claim = decoded(claim_body())
    assert caches.claims is not None
    caches.claims.store.upsert(claim)
    key = "claim:team-a/worker-0-channel"
    recheck = await setup.binding.process(key)
    assert setup.writes.conditions == [] and recheck is not None and recheck > FAILING_GRACE_SECONDS - 1
    setup.clock[0] = FAILING_GRACE_SECONDS - 1
    assert await setup.binding.process(key) is not None
    assert setup.writes.conditions == []
    setup.clock[0] = FAILING_GRACE_SECONDS
    await setup.binding.process(key)
    assert setup.writes.conditions == [("team-a/worker-0-channel", "IMEXDaemonFailed", "DaemonFailing")]
    assert ("Pod", NS, "DaemonFailing") in setup.events.subjects()
