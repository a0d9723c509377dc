"""HostManagedIMEX in the kubelet plugin: each kubelet-side case and a fault at each prepare step.

The prepare steps (docs/data-path.md §10), in order: (1) decode and validate the opaque config,
(2) exactly one allocation result, (3) allocationMode empty or Single, (4) config state, (5) channel-0
checkpoint conflict check, (6) ComputeDomain in the claim's namespace, (7) non-empty local clique ID,
(7b) the host's nvidia-imex ready, (8) CDI edits for channel 0, (9) PrepareCompleted. Faults are
injected at each step that can fail; the test checks the error class, what was left in the checkpoint
and on disk, and that nothing was labelled.
"""

from pathlib import Path
from typing import Any

import pytest
import yaml

from imexdra.api.imexmode import HOST_MANAGED_IMEX
from imexdra.common.errors import DriverError, PermanentError, RetryableError, RetryLaterError, is_permanent
from imexdra.dra.resourceclaim import ClaimRef, ResourceClaim, resource_claim
from imexdra.kubeletplugin.checkpoint.model import Checkpoint, ClaimState
from imexdra.kubeletplugin.checkpoint.store import CheckpointStore
from imexdra.kubeletplugin.configs.apply import HOST_IMEX_NOT_READY_MESSAGE, NO_CLIQUE_MESSAGE, DomainInfo
from imexdra.kubeletplugin.slices import slice_devices
from tests.unit.kubeletplugin.support import (
    DOMAIN_UID,
    NAMESPACE,
    Node,
    channel_claim,
    channel_params,
    config,
    daemon_claim,
    result,
    status,
)


@pytest.fixture
async def node(tmp_path: Path) -> Node:
    n = Node(tmp_path, imex=HOST_MANAGED_IMEX)
    await n.initialize()
    return n


def test_resource_slice_omits_daemon_device() -> None:
    """The kubelet ResourceSlice has no daemon device under the gate."""
    assert [d["name"] for d in slice_devices(imex=HOST_MANAGED_IMEX)] == ["channel-0"]


@pytest.mark.parametrize("mode", [None, "", "Single"], ids=["absent", "empty", "Single"])
async def test_channel_prepare_skips_label_and_readiness(node: Node, mode: str | None) -> None:
    """Channel prepare injects channel 0 without AddNodeLabel or AssertComputeDomainReady."""
    node.readiness.ready = False  # would block a driver-managed prepare
    devices = await node.state.prepare(channel_claim(params=channel_params(mode=mode)))
    assert [d.cdi_device_ids for d in devices] == [("k8s.compute-domain.nvidia.com/claim=claim-1-channel-0",)]
    assert node.labels.calls == []
    assert node.readiness.calls == []
    [device] = yaml.safe_load(node.cdi_file("claim-1").read_text())["devices"]
    assert [n["path"] for n in device["containerEdits"]["deviceNodes"]] == [
        "/dev/nvidia-caps-imex-channels/channel0"
    ]
    assert "mounts" not in device["containerEdits"]
    assert await node.entries() == {"claim-1": ClaimState.PREPARE_COMPLETED}


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("All", 'allocationMode "All" is not supported under HostManagedIMEX'),
        ("foo", 'allocationMode: unsupported value "foo"'),
    ],
    ids=["All", "unknown-foo"],
)
async def test_allocation_mode_allowlist(node: Node, mode: str, message: str) -> None:
    """All and unknown non-empty modes are rejected permanently by the allowlist."""
    with pytest.raises(PermanentError, match=message):
        await node.state.prepare(channel_claim(params=channel_params(mode=mode)))
    assert not node.cdi_file("claim-1").exists()
    assert node.labels.calls == []


async def test_empty_clique_is_a_permanent_error_naming_the_clique(node: Node) -> None:
    """No NVLink clique on the node is a permanent error, not upstream's silent skip."""
    node.clique = ""
    with pytest.raises(PermanentError) as caught:
        await node.state.prepare(channel_claim())
    assert str(caught.value) == NO_CLIQUE_MESSAGE
    assert "NVLink clique" in str(caught.value)
    assert not node.cdi_file("claim-1").exists()


async def test_host_imex_not_ready_is_reported_for_a_later_retry(node: Node) -> None:
    """Host IMEX not ready: a RetryLaterError quoting the check, no CDI spec; ready later, it prepares."""
    node.host_imex.not_ready = "host IMEX not ready at /etc/nvidia-imex/imex_ctrl.sock: said 'NOT_READY'"
    with pytest.raises(RetryLaterError) as caught:
        await node.state.prepare(channel_claim())
    assert str(caught.value) == f"{HOST_IMEX_NOT_READY_MESSAGE}: {node.host_imex.not_ready}"
    assert not is_permanent(caught.value)
    assert not node.cdi_file("claim-1").exists()
    assert await node.entries() == {"claim-1": ClaimState.PREPARE_STARTED}

    node.host_imex.not_ready = None
    await node.state.prepare(channel_claim())
    assert await node.entries() == {"claim-1": ClaimState.PREPARE_COMPLETED}
    assert node.host_imex.calls == 2


async def test_host_imex_is_not_asked_without_a_clique(node: Node) -> None:
    """A node without a clique fails on the clique, before (and without) the host IMEX check."""
    node.clique = ""
    node.host_imex.not_ready = "down"
    with pytest.raises(PermanentError, match="NVLink clique"):
        await node.state.prepare(channel_claim())
    assert node.host_imex.calls == 0


async def test_daemon_prepare_is_permanently_refused(node: Node) -> None:
    """A daemon claim reaching Prepare fails permanently, saying daemon claims are disabled."""
    with pytest.raises(PermanentError, match="daemon claims are disabled under HostManagedIMEX"):
        await node.state.prepare(daemon_claim())
    assert not node.paths.domain_dir(DOMAIN_UID).exists()
    assert node.owners.calls == []  # refused by the mode before anyone is asked


async def test_unprepare_skips_label_but_removes_cdi_and_checkpoint(node: Node) -> None:
    """Unprepare never calls RemoveNodeLabel and still removes CDI and checkpoint state."""
    claim = channel_claim()
    await node.state.prepare(claim)
    assert node.cdi_file("claim-1").exists()
    await node.state.unprepare(claim.ref)
    assert node.labels.calls == []
    assert not node.cdi_file("claim-1").exists()
    assert await node.entries() == {}


async def test_second_channel_claim_refused_by_checkpoint_conflict(node: Node) -> None:
    """A second channel claim on the node is refused while the first is prepared.

    The second holds channel-0 with admin access, which the device-overlap check ignores.
    """
    await node.state.prepare(channel_claim("claim-1"))
    second = resource_claim(
        ClaimRef(NAMESPACE, "claim-2-name", "claim-2"),
        status(
            [result("channel", "channel-0", admin=True)], [config(channel_params(), requests=["channel"])]
        ),
    )
    with pytest.raises(RetryableError, match="channel 0 already allocated by another claim"):
        await node.state.prepare(second)
    await node.state.unprepare(channel_claim("claim-1").ref)
    await node.state.prepare(second)
    assert await node.entries() == {"claim-2": ClaimState.PREPARE_COMPLETED}


# --- fault injection at each prepare step (docs/data-path.md §10) -----------------------------------------


class FailingStore(CheckpointStore):
    """A checkpoint whose ``fail_on``-th write raises (disk full)."""

    def __init__(self, directory: Path, fail_on: int) -> None:
        super().__init__(directory)
        self.writes = 0
        self.fail_on = fail_on

    async def _write(self, checkpoint: Checkpoint) -> None:
        self.writes += 1
        if self.writes == self.fail_on:
            raise OSError(28, "No space left on device")
        await super()._write(checkpoint)


def admin_on_channel_0() -> ResourceClaim:
    """Channel 0 with admin access: past the device-overlap check, to the channel-0 checkpoint check."""
    return resource_claim(
        ClaimRef(NAMESPACE, "claim-1-name", "claim-1"),
        status(
            [result("channel", "channel-0", admin=True)], [config(channel_params(), requests=["channel"])]
        ),
    )


def two_results() -> ResourceClaim:
    return resource_claim(
        ClaimRef(NAMESPACE, "claim-1-name", "claim-1"),
        status(
            [result("a", "channel-0"), result("b", "channel-1")],
            [config(channel_params(), requests=["a", "b"])],
        ),
    )


async def prepared_elsewhere(node: Node) -> None:
    await node.state.prepare(channel_claim("claim-0"))


def other_namespace(node: Node) -> None:
    node.domains.known[DOMAIN_UID] = DomainInfo(DOMAIN_UID, "train-a", "elsewhere")


STEPS: list[tuple[str, Any, type[DriverError], str | None]] = [
    ("1-decode", {"claim": channel_claim(params=channel_params(bogus=1))}, PermanentError, None),
    ("1-validate", {"claim": channel_claim(params=channel_params(domain=""))}, PermanentError, None),
    # Steps 2-6 write nothing, so they run before PrepareStarted is recorded (docs/tenancy.md).
    ("2-result-count", {"claim": two_results()}, RetryableError, None),
    ("3-mode", {"claim": channel_claim(params=channel_params(mode="All"))}, PermanentError, None),
    ("5-conflict", {"before": prepared_elsewhere, "claim": admin_on_channel_0()}, RetryableError, None),
    ("6-domain-missing", {"domains": {}}, PermanentError, None),
    ("6-other-namespace", {"tweak": other_namespace}, PermanentError, None),
    ("7-no-clique", {"clique": ""}, PermanentError, ClaimState.PREPARE_STARTED),
    ("7b-host-imex", {"host_imex": "not ready"}, RetryLaterError, ClaimState.PREPARE_STARTED),
    ("8-cdi-write", {"cdi_root_is_file": True}, RetryableError, ClaimState.PREPARE_STARTED),
    ("9-completed-write", {"fail_write": 2}, RetryableError, ClaimState.PREPARE_STARTED),
    ("4-started-write", {"fail_write": 1}, RetryableError, None),
]


@pytest.mark.parametrize(("fault", "expected", "left"), [s[1:] for s in STEPS], ids=[s[0] for s in STEPS])
async def test_fault_at_each_prepare_step(
    tmp_path: Path, fault: dict[str, Any], expected: type[DriverError], left: str | None
) -> None:
    """A fault at one step fails the claim with the right class, leaves the right entry and no CDI spec."""
    node = Node(tmp_path, imex=HOST_MANAGED_IMEX)
    await node.initialize()
    if "before" in fault:
        await fault["before"](node)
    if "domains" in fault:
        node.domains.known = fault["domains"]
    if "tweak" in fault:
        fault["tweak"](node)
    if "clique" in fault:
        node.clique = fault["clique"]
    if "host_imex" in fault:
        node.host_imex.not_ready = fault["host_imex"]
    if fault.get("cdi_root_is_file"):
        node.cdi_root.rmdir()
        node.cdi_root.write_text("not a directory")
        cdi_root_restore = True
    else:
        cdi_root_restore = False
    state = (
        node.new_state(FailingStore(node.paths.plugin_data_dir, fault["fail_write"]))
        if "fail_write" in fault
        else node.state
    )
    claim = fault.get("claim", channel_claim())
    with pytest.raises(DriverError) as caught:
        await state.prepare(claim)
    assert isinstance(caught.value, expected), caught.value
    assert is_permanent(caught.value) == (expected is PermanentError)
    entries = await node.entries()
    assert entries.get(claim.ref.uid) == left
    # Only a failure after step 8 can leave the claim's spec; unprepare (or the retry) takes care of it.
    assert node.cdi_file(claim.ref.uid).exists() == ("fail_write" in fault and fault["fail_write"] == 2)
    assert node.labels.calls == []
    assert node.readiness.calls == []
    if cdi_root_restore:
        node.cdi_root.unlink()
        node.cdi_root.mkdir()
    if left is not None:
        await node.state.unprepare(claim.ref)
        assert not node.cdi_file(claim.ref.uid).exists()
        assert (await node.entries()).get(claim.ref.uid) == ClaimState.PREPARE_ABORTED
