"""Background cleanup: stale partially prepared claims, expired tombstones, orphaned domain directories.

Stale claims (docs/data-path.md §12), once at start and every 10 minutes: a PrepareStarted entry whose
ResourceClaim is gone (NotFound) or was replaced (other UID) will never be unprepared by the kubelet,
so it is unprepared here, which also drops its node label; then PrepareAborted tombstones older than
90 s are forgotten. Entries without a name (legacy) are skipped; other API errors wait for the next
pass. PrepareCompleted entries are the kubelet's to unprepare and are never touched. Claim CDI specs
without a live entry (left by a plugin killed mid-unprepare before the spec was removed first) are
deleted in the same pass.

Domain directories, every 10 minutes but not at start: ``domains/<UID>`` of a ComputeDomain that
no longer exists is removed (``domaindirs``: without following the links a daemon may have planted
there). Nothing is removed before the ComputeDomain cache has synced.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import structlog

from imexdra.common.files import flock
from imexdra.common.kube.client import is_not_found
from imexdra.dra.driver import ClaimGetter
from imexdra.dra.resourceclaim import ClaimRef
from imexdra.kubeletplugin.checkpoint.model import ClaimState
from imexdra.kubeletplugin.checkpoint.store import CheckpointStore
from imexdra.kubeletplugin.devicestate import DeviceState
from imexdra.kubeletplugin.domaindirs import remove_orphaned_domain_dirs

_log = structlog.get_logger(__name__)

CLEANUP_PERIOD = 600.0
CLAIM_GET_TIMEOUT = 20.0


class StaleClaimCleanup:
    """Finds and unprepares PrepareStarted claims whose ResourceClaim is gone."""

    def __init__(
        self, *, store: CheckpointStore, state: DeviceState, get_claim: ClaimGetter, lock_path: Path
    ) -> None:
        self._store = store
        self._state = state
        self._get_claim = get_claim
        self._lock_path = lock_path

    async def run(self, period: float = CLEANUP_PERIOD) -> None:
        """One pass now, then one per ``period``, until cancelled; a failed pass waits for the next."""
        while True:
            try:
                await self.run_once()
            except Exception as error:
                _log.warning("Checkpointed RC cleanup failed", error=f"{type(error).__name__}: {error}")
            await asyncio.sleep(period)

    async def run_once(self) -> list[ClaimRef]:
        """One pass; return the claims that were unprepared."""
        checkpoint = await self._store.read()
        cleaned: list[ClaimRef] = []
        for uid, entry in checkpoint.claims.items():
            if entry.state != ClaimState.PREPARE_STARTED or not entry.name:
                continue
            ref = ClaimRef(entry.namespace, entry.name, uid)
            if not await self._is_stale(ref):
                continue
            try:
                async with flock.hold(self._lock_path):
                    await self._state.unprepare(ref)
            except Exception as error:
                _log.warning("Checkpointed RC cleanup: unprepare failed", claim=str(ref), error=str(error))
                continue
            _log.info(f"Checkpointed RC cleanup: unprepared stale claim: {ref}")
            cleaned.append(ref)
        async with flock.hold(self._lock_path):
            expired = await self._state.delete_expired_aborted()
            orphans = await self._state.remove_orphaned_claim_specs()
        if expired:
            _log.info("Checkpointed RC cleanup: forgot expired PrepareAborted entries", count=expired)
        if orphans:
            _log.info("Checkpointed RC cleanup: removed CDI specs of unprepared claims", claims=orphans)
        return cleaned

    async def _is_stale(self, ref: ClaimRef) -> bool:
        try:
            async with asyncio.timeout(CLAIM_GET_TIMEOUT):
                claim = await self._get_claim(ref.namespace, ref.name)
        except Exception as error:
            if is_not_found(error):
                return True
            _log.info("Checkpointed RC cleanup: cannot check claim", claim=str(ref), error=str(error))
            return False
        if claim.ref.uid != ref.uid:
            return True
        _log.info(f"Checkpointed RC cleanup: partially prepared claim not stale: {ref}")
        return False


async def clean_domain_dirs_periodically(
    domains_dir: Path, known_uids: Callable[[], set[str] | None], period: float = CLEANUP_PERIOD
) -> None:
    """Every ``period``, remove the domain directories of ComputeDomains that no longer exist."""
    while True:
        await asyncio.sleep(period)
        known = known_uids()
        if known is not None:
            await asyncio.to_thread(remove_orphaned_domain_dirs, domains_dir, known)
