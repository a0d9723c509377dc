"""A claim refused for its namespace leaves nothing an unprepare could act on (docs/tenancy.md).

The victim's ComputeDomain lives in ``team-a`` and its label is on the node; an intruder in another
namespace names it in a hand-written channel claim. Upstream records PrepareStarted before the
namespace assertion, so such an entry may also come from upstream's plugin or an older imexdra.
"""

import pytest

from imexdra.common.errors import PermanentError
from imexdra.dra.resourceclaim import ClaimRef, ResourceClaim
from imexdra.kubeletplugin.checkpoint.model import Checkpoint, ClaimState
from imexdra.kubeletplugin.checkpoint.store import mark_prepare_started
from tests.unit.kubeletplugin.support import DOMAIN_UID, NAMESPACE, Node, channel_claim

INTRUDER_NAMESPACE = "intruder"


def intruders_claim() -> ResourceClaim:
    """A claim in the intruder's namespace whose channel config names the victim's domain."""
    return channel_claim("intruder-claim", namespace=INTRUDER_NAMESPACE)


async def record_as_upstream_does(node: Node, claim: ResourceClaim) -> None:
    """The PrepareStarted entry upstream (and imexdra before this check moved) wrote before refusing."""
    ref = claim.ref

    def started(checkpoint: Checkpoint) -> Checkpoint:
        mark_prepare_started(
            checkpoint, ref.uid, status=claim.status_json, name=ref.name, namespace=ref.namespace
        )
        return checkpoint

    await node.store.update(started)


async def test_refused_claim_leaves_no_entry_and_unprepare_touches_nothing(node: Node) -> None:
    """Refused before PrepareStarted: no entry, and its unprepare leaves the victim's label alone."""
    node.labels.value = DOMAIN_UID
    with pytest.raises(PermanentError, match="in the ResourceClaim's namespace intruder"):
        await node.state.prepare(intruders_claim())
    assert await node.entries() == {}
    await node.state.unprepare(intruders_claim().ref)
    assert node.labels.calls == []
    assert node.labels.value == DOMAIN_UID


async def test_unprepare_of_an_unchecked_entry_keeps_the_victims_label(node: Node) -> None:
    """A PrepareStarted entry naming another namespace's domain is tombstoned without removing its label."""
    node.labels.value = DOMAIN_UID
    await record_as_upstream_does(node, intruders_claim())
    await node.state.unprepare(intruders_claim().ref)
    assert node.labels.calls == []
    assert node.labels.value == DOMAIN_UID
    assert await node.entries() == {"intruder-claim": ClaimState.PREPARE_ABORTED}


async def test_an_unchecked_entry_does_not_keep_the_victims_label(node: Node) -> None:
    """When the victim's last claim goes, the intruder's PrepareStarted entry does not hold its label."""
    victim = channel_claim("victim-claim")
    await node.state.prepare(victim)
    await record_as_upstream_does(node, intruders_claim())
    await node.state.unprepare(victim.ref)
    assert node.labels.calls == [("add", DOMAIN_UID), ("remove", DOMAIN_UID)]
    assert node.labels.value is None


async def test_a_started_claim_of_the_domains_namespace_still_keeps_the_label(node: Node) -> None:
    """A PrepareStarted claim whose namespace is its domain's keeps the label (checked at unprepare)."""
    victim = channel_claim("victim-claim")
    await node.state.prepare(victim)
    await record_as_upstream_does(node, channel_claim("waiting-claim"))
    await node.state.unprepare(victim.ref)
    assert node.labels.value == DOMAIN_UID
    await node.state.unprepare(ClaimRef(NAMESPACE, "waiting-claim-name", "waiting-claim"))
    assert node.labels.value is None
