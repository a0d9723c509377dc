"""Channel isolation in the kubelet plugin: the prepare checks of docs/channel-isolation.md §6.

In order: one result ``channel-N`` with ``N >= 1`` and ``Single``; the domain in the claim's namespace;
the domain's ``status.channel`` is ``N`` (mismatch permanent, none yet retryable); no other domain's
claim holds ``channel-N`` on this node; then exactly ``channel<N>`` is injected and checkpointed.
"""

from pathlib import Path

import pytest
import yaml

from imexdra.api.constants import DeviceType
from imexdra.api.imexmode import HOST_MANAGED_IMEX
from imexdra.common.errors import PermanentError, RetryableError, is_permanent
from imexdra.kubeletplugin.checkpoint.model import ClaimState
from imexdra.kubeletplugin.configs.apply import DomainInfo
from tests.unit.kubeletplugin.support import DOMAIN_UID, NAMESPACE, OTHER_DOMAIN_UID, Node, claim_on


@pytest.fixture
async def node(tmp_path: Path) -> Node:
    """A host-managed node under channel isolation; domain ``train-a`` has channel 7."""
    n = Node(tmp_path, imex=HOST_MANAGED_IMEX, channel_isolation=True)
    n.domains.known[DOMAIN_UID] = DomainInfo(DOMAIN_UID, "train-a", NAMESPACE, channel=7)
    n.domains.known[OTHER_DOMAIN_UID] = DomainInfo(OTHER_DOMAIN_UID, "train-b", NAMESPACE, channel=8)
    await n.initialize()
    return n


def injected(node: Node, uid: str) -> list[str]:
    """The device node paths of ``uid``'s CDI claim spec."""
    [device] = yaml.safe_load(node.cdi_file(uid).read_text())["devices"]
    return [entry["path"] for entry in device["containerEdits"]["deviceNodes"]]


async def test_the_domains_own_channel_is_injected_and_checkpointed(node: Node) -> None:
    """channel-7 of a domain recording 7: only channel7's node is injected; the checkpoint keeps 7."""
    devices = await node.state.prepare(claim_on("channel-7"))
    assert [d.cdi_device_ids for d in devices] == [("k8s.compute-domain.nvidia.com/claim=claim-1-channel-7",)]
    assert injected(node, "claim-1") == ["/dev/nvidia-caps-imex-channels/channel7"]
    checkpoint = await node.store.read()
    entry = checkpoint.claims["claim-1"]
    assert entry.state == ClaimState.PREPARE_COMPLETED
    assert [(d.type, d.id) for d in entry.all_devices()] == [(DeviceType.CHANNEL, 7)]
    assert node.host_imex.calls == 1
    assert node.labels.calls == []


async def test_two_domains_share_the_node_each_with_its_channel(node: Node) -> None:
    """Claims of two domains prepare side by side on one node, each seeing only its own channel."""
    await node.state.prepare(claim_on("channel-7", "claim-a"))
    await node.state.prepare(claim_on("channel-8", "claim-b", domain=OTHER_DOMAIN_UID))
    assert injected(node, "claim-a") == ["/dev/nvidia-caps-imex-channels/channel7"]
    assert injected(node, "claim-b") == ["/dev/nvidia-caps-imex-channels/channel8"]
    assert await node.entries() == {
        "claim-a": ClaimState.PREPARE_COMPLETED,
        "claim-b": ClaimState.PREPARE_COMPLETED,
    }


async def test_another_domains_channel_is_refused_for_good(node: Node) -> None:
    """A claim on channel-8 naming a domain that records 7 fails permanently, naming both numbers."""
    with pytest.raises(PermanentError) as caught:
        await node.state.prepare(claim_on("channel-8"))
    message = str(caught.value)
    assert "claim was allocated channel-8 but ComputeDomain team-a/train-a has channel 7" in message
    assert "spec.channel.resourceClaimTemplate.name" in message
    assert is_permanent(caught.value)
    assert not node.cdi_file("claim-1").exists()
    assert node.host_imex.calls == 0


async def test_a_domain_without_a_number_yet_is_retried(node: Node) -> None:
    """No status.channel yet: retryable (the controller's write may lag); once recorded, it prepares."""
    node.domains.known[DOMAIN_UID] = DomainInfo(DOMAIN_UID, "train-a", NAMESPACE)
    with pytest.raises(RetryableError, match="has no IMEX channel recorded yet") as caught:
        await node.state.prepare(claim_on("channel-7"))
    assert not is_permanent(caught.value)
    node.domains.known[DOMAIN_UID] = DomainInfo(DOMAIN_UID, "train-a", NAMESPACE, channel=7)
    await node.state.prepare(claim_on("channel-7"))
    assert injected(node, "claim-1") == ["/dev/nvidia-caps-imex-channels/channel7"]


@pytest.mark.parametrize(
    ("device", "mode", "message"),
    [
        ("channel-0", "Single", "claim was allocated channel-0, the shared channel of domain isolation"),
        ("channel-7", "All", 'allocationMode "All" is not supported under channel isolation'),
    ],
    ids=["channel-0", "All"],
)
async def test_claims_of_domain_isolation_are_refused_for_good(
    node: Node, device: str, mode: str, message: str
) -> None:
    """Channel 0 and allocationMode All belong to domain isolation: permanent errors saying so."""
    with pytest.raises(PermanentError, match=message):
        await node.state.prepare(claim_on(device, mode=mode))
    assert not node.cdi_file("claim-1").exists()
    assert node.domains.lookups == []  # refused before the domain is even looked up


async def test_namespace_is_checked_before_the_number(node: Node) -> None:
    """A claim naming another namespace's domain fails on the namespace, whatever the channel."""
    node.domains.known[DOMAIN_UID] = DomainInfo(DOMAIN_UID, "train-a", "elsewhere", channel=7)
    with pytest.raises(PermanentError, match="error asserting ComputeDomain's namespace"):
        await node.state.prepare(claim_on("channel-7"))


async def test_a_channel_preparing_for_another_domain_blocks_the_node(node: Node) -> None:
    """Node invariant: channel-7 half prepared (PrepareStarted) for domain B keeps domain A off it.

    B records 7 as well (a duplicate the controller reports, docs/channel-isolation.md §4 rule 4);
    the device-overlap check only sees PrepareCompleted claims, this check sees both states.
    """
    node.domains.known[OTHER_DOMAIN_UID] = DomainInfo(OTHER_DOMAIN_UID, "train-b", NAMESPACE, channel=7)
    node.host_imex.not_ready = "starting"
    with pytest.raises(RetryableError):
        await node.state.prepare(claim_on("channel-7", "claim-b", domain=OTHER_DOMAIN_UID))
    assert await node.entries() == {"claim-b": ClaimState.PREPARE_STARTED}
    node.host_imex.not_ready = None
    with pytest.raises(
        RetryableError, match="channel 7 is held on this node by a claim of another ComputeDomain"
    ):
        await node.state.prepare(claim_on("channel-7", "claim-a"))
    await node.state.unprepare(claim_on("channel-7", "claim-b", domain=OTHER_DOMAIN_UID).ref)
    await node.state.prepare(claim_on("channel-7", "claim-a"))
    assert injected(node, "claim-a") == ["/dev/nvidia-caps-imex-channels/channel7"]


async def test_the_same_domain_may_hold_its_channel_twice(node: Node) -> None:
    """A PrepareStarted claim of the same domain on its channel does not block another of that domain."""
    node.host_imex.not_ready = "starting"
    with pytest.raises(RetryableError):
        await node.state.prepare(claim_on("channel-7", "claim-1"))
    node.host_imex.not_ready = None
    await node.state.prepare(claim_on("channel-7", "claim-2"))
    assert injected(node, "claim-2") == ["/dev/nvidia-caps-imex-channels/channel7"]


async def test_domain_isolation_refuses_a_channel_isolation_claim(tmp_path: Path) -> None:
    """Under domain isolation a claim on channel-5 (published only under channel isolation) is permanent."""
    node = Node(tmp_path, imex=HOST_MANAGED_IMEX)
    await node.initialize()
    with pytest.raises(PermanentError, match="channel-5, which only channel isolation publishes"):
        await node.state.prepare(claim_on("channel-5"))
    assert not node.cdi_file("claim-1").exists()
