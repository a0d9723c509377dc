"""Stale-claim cleanup, expired tombstones and orphaned domain directories (docs/data-path.md §11, §12)."""

import datetime
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from imexdra.common.errors import RetryableError
from imexdra.common.kube.client import PermanentApiError, RetryableApiError
from imexdra.dra.resourceclaim import ResourceClaim, parse_claim
from imexdra.kubeletplugin.checkpoint.model import ClaimState
from imexdra.kubeletplugin.cleanup import StaleClaimCleanup
from tests.unit.kubeletplugin.support import NAMESPACE, Node, channel_claim, daemon_claim


class Api:
    """ResourceClaims by name; a name mapped to an exception raises it."""

    def __init__(self, claims: dict[str, Mapping[str, Any] | Exception]) -> None:
        self.claims = claims

    async def get(self, namespace: str, name: str) -> ResourceClaim:
        answer = self.claims[name]
        if isinstance(answer, Exception):
            raise answer
        return parse_claim(answer)


async def partially_prepared(node: Node, uid: str) -> None:
    node.readiness.ready = False
    with pytest.raises(RetryableError):
        await node.state.prepare(channel_claim(uid))
    node.readiness.ready = True


@pytest.mark.parametrize(
    ("answer", "stale"),
    [
        (PermanentApiError("get: 404 NotFound", code=404), True),
        ({"metadata": {"uid": "another-uid"}}, True),
        ({"metadata": {"uid": "claim-1"}}, False),
        (RetryableApiError("get: 503", code=503), False),
    ],
    ids=["deleted", "replaced", "still-there", "api-error-waits"],
)
async def test_partially_prepared_claims(tmp_path: Path, answer: Any, stale: bool) -> None:
    """Only PrepareStarted claims whose ResourceClaim is gone or replaced are unprepared."""
    node = Node(tmp_path)
    await node.initialize()
    await partially_prepared(node, "claim-1")
    cleanup = StaleClaimCleanup(
        store=node.store,
        state=node.state,
        get_claim=Api({"claim-1-name": answer}).get,
        lock_path=node.paths.prepare_lock,
    )
    with capture_logs() as logs:
        cleaned = await cleanup.run_once()
    assert [ref.uid for ref in cleaned] == (["claim-1"] if stale else [])
    expected = ClaimState.PREPARE_ABORTED if stale else ClaimState.PREPARE_STARTED
    assert await node.entries() == {"claim-1": expected}
    assert (node.labels.value is None) == stale
    events = [entry["event"] for entry in logs]
    if stale:
        assert f"Checkpointed RC cleanup: unprepared stale claim: {NAMESPACE}/claim-1-name:claim-1" in events
    elif isinstance(answer, dict):
        assert (
            f"Checkpointed RC cleanup: partially prepared claim not stale: {NAMESPACE}/claim-1-name:claim-1"
            in events
        )


async def test_completed_claims_are_left_to_the_kubelet(tmp_path: Path) -> None:
    """PrepareCompleted entries are never collected, even if their claim is gone."""
    node = Node(tmp_path)
    await node.initialize()
    await node.state.prepare(channel_claim("claim-1"))
    gone = PermanentApiError("404", code=404)
    cleanup = StaleClaimCleanup(
        store=node.store,
        state=node.state,
        get_claim=Api({"claim-1-name": gone}).get,
        lock_path=node.paths.prepare_lock,
    )
    assert await cleanup.run_once() == []
    assert await node.entries() == {"claim-1": ClaimState.PREPARE_COMPLETED}


async def test_pass_forgets_expired_tombstones(tmp_path: Path) -> None:
    """A pass also drops PrepareAborted entries past their TTL (fresh ones stay)."""
    node = Node(tmp_path)
    await node.initialize()
    await partially_prepared(node, "claim-1")
    await node.state.unprepare(channel_claim("claim-1").ref)
    cleanup = StaleClaimCleanup(
        store=node.store, state=node.state, get_claim=Api({}).get, lock_path=node.paths.prepare_lock
    )
    await cleanup.run_once()
    assert await node.entries() == {"claim-1": ClaimState.PREPARE_ABORTED}
    later = node.new_state(clock=lambda: datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=91))
    await StaleClaimCleanup(
        store=node.store, state=later, get_claim=Api({}).get, lock_path=node.paths.prepare_lock
    ).run_once()
    assert await node.entries() == {}


async def test_pass_removes_claim_specs_without_a_live_entry(tmp_path: Path) -> None:
    """Specs of prepared and partially prepared claims stay; an orphan goes; other files stay."""
    node = Node(tmp_path)
    await node.initialize()
    await node.state.prepare(daemon_claim("claim-1"))
    await partially_prepared(node, "claim-2")
    node.cdi_file("claim-2").write_text("---\n")  # written just before a kill, PrepareStarted kept
    node.cdi_file("gone").write_text("---\n")  # left by an unprepare that deleted its entry first
    (node.cdi_root / "vendor.com-gpu.yaml").write_text("---\n")
    cleanup = StaleClaimCleanup(
        store=node.store,
        state=node.state,
        get_claim=Api({"claim-2-name": {"metadata": {"uid": "claim-2"}}}).get,
        lock_path=node.paths.prepare_lock,
    )
    with capture_logs() as logs:
        await cleanup.run_once()
    assert not node.cdi_file("gone").exists()
    assert node.cdi_file("claim-1").exists() and node.cdi_file("claim-2").exists()
    assert (node.cdi_root / "vendor.com-gpu.yaml").exists()
    assert [log.get("claims") for log in logs if "CDI specs" in log["event"]] == [["gone"]]
