"""Prepare and unprepare in driver-managed mode: checkpoint lifecycle, CDI specs, labels, readiness, errors.

Specification: docs/data-path.md §7, §11, and docs/compatibility.md §3.2.
"""

import dataclasses
import datetime

import pytest
import yaml

from imexdra.common.errors import ConfigError, PermanentError, RetryableError, is_permanent
from imexdra.dra.resourceclaim import ClaimRef, MalformedClaimError, resource_claim
from imexdra.kubeletplugin.checkpoint.model import ClaimState
from imexdra.kubeletplugin.checkpoint.store import mark_prepare_aborted
from imexdra.kubeletplugin.configs.apply import DomainInfo
from tests.unit.kubeletplugin.support import (
    CLIQUE,
    DOMAIN_UID,
    NAMESPACE,
    OTHER_DOMAIN_UID,
    Node,
    channel_claim,
    channel_params,
    config,
    daemon_claim,
    result,
    status,
)

CHANNEL_ID = "k8s.compute-domain.nvidia.com/claim=claim-1-channel-0"


async def test_channel_claim_prepared(node: Node) -> None:
    """Label, readiness, CDI spec with channel0, PrepareCompleted with the kubelet-facing devices."""
    devices = await node.state.prepare(channel_claim())
    assert [(d.requests, d.pool_name, d.device_name, d.cdi_device_ids) for d in devices] == [
        (("channel",), "node-a", "channel-0", (CHANNEL_ID,))
    ]
    assert node.labels.value == DOMAIN_UID
    assert node.readiness.calls == [(DOMAIN_UID, CLIQUE)]
    spec = yaml.safe_load(node.cdi_file("claim-1").read_text())
    assert spec["kind"] == "k8s.compute-domain.nvidia.com/claim"
    [device] = spec["devices"]
    assert device["name"] == "claim-1-channel-0"
    assert device["containerEdits"]["deviceNodes"] == [
        {
            "path": "/dev/nvidia-caps-imex-channels/channel0",
            "hostPath": "/dev/nvidia-caps-imex-channels/channel0",
            "type": "c",
            "major": 235,
            "fileMode": 438,
        }
    ]
    assert node.cdi_file("claim-1").stat().st_mode & 0o777 == 0o600
    assert await node.entries() == {"claim-1": ClaimState.PREPARE_COMPLETED}


async def test_allocation_mode_all_injects_every_channel(node: Node) -> None:
    """allocationMode All gets channel0..channel2047, in upstream's string order."""
    await node.state.prepare(channel_claim(params=channel_params(mode="All")))
    [device] = yaml.safe_load(node.cdi_file("claim-1").read_text())["devices"]
    paths = [n["path"].rsplit("/", 1)[1] for n in device["containerEdits"]["deviceNodes"]]
    assert len(paths) == 2048
    assert paths[:4] == ["channel0", "channel1", "channel10", "channel100"]
    assert {"channel2047", "channel222"} <= set(paths)


async def test_node_without_clique_gets_no_cdi_device(node: Node) -> None:
    """No NVLink clique: still labelled and readiness-checked, but no CDI IDs and no claim spec."""
    node.clique = ""
    devices = await node.state.prepare(channel_claim())
    assert [d.cdi_device_ids for d in devices] == [()]
    assert not node.cdi_file("claim-1").exists()
    assert node.labels.value == DOMAIN_UID
    assert node.readiness.calls == [(DOMAIN_UID, "")]
    checkpoint = await node.store.read()
    [group] = checkpoint.claims["claim-1"].prepared_devices
    assert group.devices[0].device.cdi_device_ids == ()


async def test_not_ready_is_retryable_and_leaves_prepare_started(node: Node) -> None:
    """Until the local daemon is Ready the claim retries; the label is already there for the daemon."""
    node.readiness.ready = False
    with pytest.raises(RetryableError, match="current node not ready in ComputeDomain"):
        await node.state.prepare(channel_claim())
    assert node.labels.value == DOMAIN_UID
    assert await node.entries() == {"claim-1": ClaimState.PREPARE_STARTED}
    assert not node.cdi_file("claim-1").exists()
    node.readiness.ready = True
    await node.state.prepare(channel_claim())
    assert await node.entries() == {"claim-1": ClaimState.PREPARE_COMPLETED}


async def test_label_of_another_domain_is_a_retryable_conflict(node: Node) -> None:
    """One ComputeDomain per node: another domain's label blocks (retryably) until it goes."""
    node.labels.value = OTHER_DOMAIN_UID
    with pytest.raises(RetryableError, match="label already exists for a different ComputeDomain"):
        await node.state.prepare(channel_claim())
    assert node.readiness.calls == []


@pytest.mark.parametrize(
    ("known", "message"),
    [
        ({}, f"no ComputeDomain with UID {DOMAIN_UID} in the ResourceClaim's namespace"),
        (
            {DOMAIN_UID: DomainInfo(DOMAIN_UID, "train-a", "elsewhere")},
            f"no ComputeDomain with UID {DOMAIN_UID} in the ResourceClaim's namespace",
        ),
    ],
    ids=["domain-missing", "other-namespace"],
)
async def test_namespace_assertion_is_permanent(
    node: Node, known: dict[str, DomainInfo], message: str
) -> None:
    """The ComputeDomain must exist in the claim's namespace; otherwise the claim fails for good.

    Both refusals read alike and name no other namespace: the claim's owner learns nothing of others.
    """
    node.domains.known = known
    with pytest.raises(PermanentError, match=message) as refused:
        await node.state.prepare(channel_claim())
    assert "elsewhere" not in str(refused.value)
    assert node.labels.calls == []


async def test_channel_zero_held_by_another_claim(node: Node) -> None:
    """A channel claim is checked against channel 0 of completed claims (retryable conflict).

    The second claim holds channel-0 with admin access, which the device-overlap check ignores.
    """
    await node.state.prepare(channel_claim("claim-1"))
    second = channel_claim("claim-2")
    second = resource_claim(
        second.ref,
        status(
            [result("channel", "channel-0", admin=True)], [config(channel_params(), requests=["channel"])]
        ),
    )
    with pytest.raises(
        RetryableError, match=r"channel 0 already allocated by another claim \(according to checkpoint\)"
    ):
        await node.state.prepare(second)


async def test_device_overlap_with_another_claim(node: Node) -> None:
    """A device held by another prepared claim is refused before anything is written."""
    await node.state.prepare(daemon_claim("daemon-1"))
    with pytest.raises(
        RetryableError, match="requested device daemon-0 is already allocated to a different claim"
    ):
        await node.state.prepare(daemon_claim("daemon-2"))
    assert await node.entries() == {"daemon-1": ClaimState.PREPARE_COMPLETED}


async def test_completed_claim_is_returned_without_side_effects(node: Node) -> None:
    """Idempotent: a prepared claim is answered from the checkpoint, even if the world changed since."""
    first = await node.state.prepare(channel_claim())
    node.domains.known.clear()
    node.readiness.ready = False
    calls = len(node.labels.calls)
    assert await node.state.prepare(channel_claim()) == first
    assert len(node.labels.calls) == calls


async def test_restarted_plugin_returns_the_same_result(node: Node) -> None:
    """A new process over the same checkpoint answers a prepared claim identically."""
    first = await node.state.prepare(channel_claim())
    restarted = node.new_state()
    assert await restarted.prepare(channel_claim()) == first


async def test_aborted_claim_with_same_status_is_stale(node: Node) -> None:
    """PrepareAborted blocks a re-prepare of the same status permanently; a changed status proceeds."""
    claim = channel_claim()
    node.readiness.ready = False
    with pytest.raises(RetryableError):
        await node.state.prepare(claim)
    await node.state.unprepare(claim.ref)
    assert await node.entries() == {"claim-1": ClaimState.PREPARE_ABORTED}
    node.readiness.ready = True
    with pytest.raises(
        PermanentError,
        match="stale prepare for claim team-a/claim-1-name:claim-1: claim prepare was already aborted",
    ):
        await node.state.prepare(claim)
    reserved = {**claim.status_json, "reservedFor": [{"resource": "pods", "name": "p", "uid": "pod-2"}]}
    await node.state.prepare(resource_claim(claim.ref, reserved))
    assert await node.entries() == {"claim-1": ClaimState.PREPARE_COMPLETED}


@pytest.mark.parametrize(
    "params",
    [channel_params(unexpectedField="x"), channel_params(domain=""), channel_params(mode="foo")],
    ids=["unknown-field", "empty-domain", "unknown-mode"],
)
async def test_bad_config_is_permanent_and_leaves_no_entry(node: Node, params: dict[str, object]) -> None:
    """A config that can never apply fails permanently before the checkpoint is touched."""
    with pytest.raises(ConfigError) as caught:
        await node.state.prepare(channel_claim(params=params))
    assert is_permanent(caught.value)
    assert await node.entries() == {}


async def test_claim_without_config_is_permanent(node: Node) -> None:
    """No opaque config: the default config has no domainID, which no retry can fix."""
    claim = resource_claim(ClaimRef(NAMESPACE, "c", "claim-1"), status([result("channel", "channel-0")]))
    with pytest.raises(ConfigError, match="domainID"):
        await node.state.prepare(claim)


async def test_daemon_claim_prepared(node: Node) -> None:
    """The daemon gets env, its /imexd dir, the fabric-imex-mgmt node, and device=all before its own ID."""
    devices = await node.state.prepare(daemon_claim())
    assert [d.cdi_device_ids for d in devices] == [
        ("k8s.compute-domain.nvidia.com/device=all", "k8s.compute-domain.nvidia.com/claim=daemon-1-daemon-0")
    ]
    domain_dir = node.paths.domain_dir(DOMAIN_UID)
    assert domain_dir.is_dir()
    [device] = yaml.safe_load(node.cdi_file("daemon-1").read_text())["devices"]
    edits = device["containerEdits"]
    assert edits["env"] == [
        f"CLIQUE_ID={CLIQUE}",
        f"COMPUTE_DOMAIN_UUID={DOMAIN_UID}",
        "COMPUTE_DOMAIN_NAME=train-a",
        f"COMPUTE_DOMAIN_NAMESPACE={NAMESPACE}",
    ]
    assert edits["deviceNodes"][0]["path"] == "/dev/nvidia-caps/nvidia-cap512"
    assert edits["mounts"] == [
        {"hostPath": str(domain_dir), "containerPath": "/imexd", "options": ["rw", "nosuid", "nodev", "bind"]}
    ]
    assert node.labels.calls == []


async def test_daemon_claim_without_clique(node: Node) -> None:
    """Non-fabric node: CLIQUE_ID is set empty and no fabric-management node is injected."""
    node.clique = ""
    await node.state.prepare(daemon_claim())
    [device] = yaml.safe_load(node.cdi_file("daemon-1").read_text())["devices"]
    assert device["containerEdits"]["env"][0] == "CLIQUE_ID="
    assert "deviceNodes" not in device["containerEdits"]


async def test_daemon_claim_for_unknown_domain_retries(node: Node) -> None:
    """The daemon's domain must be known; until then the claim is retried."""
    with pytest.raises(RetryableError, match=f"compute domain not found: {OTHER_DOMAIN_UID}"):
        await node.state.prepare(daemon_claim(domain=OTHER_DOMAIN_UID))


async def test_daemon_claim_of_another_owner_is_refused_before_anything_is_written(node: Node) -> None:
    """A daemon claim its domain's daemon pods do not hold: permanent, no checkpoint entry, no domain dir."""
    node.owners.refusal = "not the IMEX daemon DaemonSet of ComputeDomain"
    with pytest.raises(PermanentError, match="not the IMEX daemon DaemonSet"):
        await node.state.prepare(daemon_claim())
    assert node.owners.calls == [("daemon-1", DOMAIN_UID)]
    assert await node.entries() == {}
    assert not node.paths.domain_dir(DOMAIN_UID).exists()
    assert not node.cdi_file("daemon-1").exists()


async def test_channel_claims_are_not_held_to_daemon_owners(node: Node) -> None:
    """The owner check is for daemon claims only: a channel claim never asks it."""
    node.owners.refusal = "refused"
    await node.state.prepare(channel_claim())
    assert node.owners.calls == []


async def test_unprepare_completed_claim(node: Node) -> None:
    """Unprepare removes the label, the checkpoint entry and the CDI spec."""
    claim = channel_claim()
    await node.state.prepare(claim)
    await node.state.unprepare(claim.ref)
    assert node.labels.value is None
    assert await node.entries() == {}
    assert not node.cdi_file("claim-1").exists()
    await node.state.unprepare(claim.ref)  # idempotent
    assert node.labels.calls[-1] == ("remove", DOMAIN_UID)


@pytest.mark.parametrize("partial", [False, True], ids=["completed", "started"])
async def test_unprepare_interrupted_before_the_checkpoint_write(
    node: Node, monkeypatch: pytest.MonkeyPatch, partial: bool
) -> None:
    """The spec goes before the entry: an unprepare cut short leaves the entry, and the retry finishes."""
    claim = channel_claim()
    if partial:  # a prepare killed after its spec was written, before PrepareCompleted
        node.readiness.ready = False
        with pytest.raises(RetryableError):
            await node.state.prepare(claim)
        node.cdi_file("claim-1").write_text("---\n")
    else:
        await node.state.prepare(claim)
    assert node.cdi_file("claim-1").exists()

    async def fail(*_args: object) -> None:
        raise OSError("disk full")

    with monkeypatch.context() as patch:
        patch.setattr(node.store, "update", fail)
        with pytest.raises(RetryableError, match="error writing checkpoint"):
            await node.state.unprepare(claim.ref)
    assert not node.cdi_file("claim-1").exists()
    state = ClaimState.PREPARE_STARTED if partial else ClaimState.PREPARE_COMPLETED
    assert await node.entries() == {"claim-1": state}
    await node.state.unprepare(claim.ref)
    assert await node.entries() == ({"claim-1": ClaimState.PREPARE_ABORTED} if partial else {})


async def test_unprepare_started_claim_leaves_a_tombstone(node: Node) -> None:
    """A partially prepared claim becomes PrepareAborted (time-stamped); a second unprepare is a no-op."""
    claim = channel_claim()
    node.readiness.ready = False
    with pytest.raises(RetryableError):
        await node.state.prepare(claim)
    await node.state.unprepare(claim.ref)
    entry = (await node.store.read()).claims["claim-1"]
    assert entry.state == ClaimState.PREPARE_ABORTED
    assert entry.aborted_at is not None
    assert (entry.name, entry.namespace) == ("claim-1-name", NAMESPACE)
    assert node.labels.value is None
    removes = node.labels.calls.count(("remove", DOMAIN_UID))
    await node.state.unprepare(claim.ref)
    assert node.labels.calls.count(("remove", DOMAIN_UID)) == removes


async def test_unprepare_unknown_claim_succeeds(node: Node) -> None:
    """The kubelet may unprepare what this node never prepared."""
    await node.state.unprepare(ClaimRef(NAMESPACE, "nope", "nope-uid"))
    assert node.labels.calls == []


async def test_label_removed_with_the_last_claim_of_its_domain(node: Node) -> None:
    """A refused second claim leaves no entry, so unpreparing the first removes the label."""
    await node.state.prepare(channel_claim("claim-1"))
    with pytest.raises(RetryableError, match="already allocated to a different claim"):
        await node.state.prepare(channel_claim("claim-2"))
    await node.state.unprepare(channel_claim("claim-1").ref)
    assert node.labels.value is None


async def test_label_kept_while_a_partially_prepared_claim_of_the_domain_remains(node: Node) -> None:
    """A PrepareStarted claim of the same domain keeps the label when a completed one goes."""
    node.readiness.ready = False
    with pytest.raises(RetryableError):
        await node.state.prepare(channel_claim("claim-s"))
    node.readiness.ready = True
    completed = resource_claim(
        ClaimRef(NAMESPACE, "claim-c-name", "claim-c"),
        status([result("channel", "channel-0")], [config(channel_params(), requests=["channel"])]),
    )
    await node.state.prepare(completed)
    await node.state.unprepare(completed.ref)
    assert node.labels.value == DOMAIN_UID
    await node.state.unprepare(channel_claim("claim-s").ref)
    assert node.labels.value is None


async def test_legacy_entry_reads_the_claim_from_the_api(node: Node) -> None:
    """An entry without status is unprepared from the API's claim; if that fails, permanently."""
    claim = channel_claim()
    await node.state.prepare(claim)
    checkpoint = await node.store.read()
    entry = checkpoint.claims["claim-1"]
    checkpoint.claims["claim-1"] = type(entry)(state=entry.state, prepared_devices=entry.prepared_devices)
    await node.store.write(checkpoint)
    with pytest.raises(PermanentError, match="legacy checkpoint entry"):
        await node.state.unprepare(claim.ref)
    node.api_claims[NAMESPACE, "claim-1-name"] = {"metadata": {"uid": "claim-1"}, "status": claim.status_json}
    await node.state.unprepare(claim.ref)
    assert await node.entries() == {}
    assert node.labels.value is None


async def test_expired_tombstones_are_forgotten(node: Node) -> None:
    """PrepareAborted entries older than 90 s go; fresh ones stay."""
    claim = channel_claim()
    node.readiness.ready = False
    with pytest.raises(RetryableError):
        await node.state.prepare(claim)
    old = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=91)
    await node.store.update(lambda cp: mark_prepare_aborted(cp, "claim-1", name="n", namespace="ns", now=old))
    assert await node.state.delete_expired_aborted() == 1
    assert await node.entries() == {}


async def test_malformed_recorded_status_fails_unprepare_permanently(node: Node) -> None:
    """A checkpointed status that does not decode into the API types cannot be undone: permanent."""
    await node.state.prepare(channel_claim())
    checkpoint = await node.store.read()
    entry = checkpoint.claims["claim-1"]
    bad = {"allocation": {"devices": {"results": [{**result("channel", "channel-0"), "adminAccess": "yes"}]}}}
    checkpoint.claims["claim-1"] = dataclasses.replace(entry, status=bad)
    await node.store.write(checkpoint)
    with pytest.raises(MalformedClaimError, match="adminAccess") as caught:
        await node.state.unprepare(channel_claim().ref)
    assert is_permanent(caught.value)
    assert await node.entries() == {"claim-1": ClaimState.PREPARE_COMPLETED}


async def test_channel_prepare_looks_the_domain_up_once(node: Node) -> None:
    """The namespace check and the readiness check share one ComputeDomain lookup per attempt."""
    await node.state.prepare(channel_claim())
    assert node.domains.lookups == [DOMAIN_UID]
