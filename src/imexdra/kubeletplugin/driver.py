"""The IMEX driver behind the gRPC servers: per-claim locking, retries, error classes, metrics.

Implements ``imexdra.dra.driver.Driver`` (docs/errors.md §3). Each claim attempt takes the
node-global ``pu.lock`` (10 s timeout), runs ``DeviceState`` and releases the lock, so a channel claim
waiting for its IMEX daemon never blocks the daemon's own claim. An error decides the claim's fate by
its class: the first ``DriverError`` in its cause chain that is a ``PermanentError`` ends the claim
with that error (the kubelet turns it into a ``FailedPrepareDynamicResources`` pod event); so does a
``RetryLaterError`` (e.g. host IMEX not ready), which the kubelet retries on its next pod sync; anything
else is retried within the call's budget (``retries``). Error texts are upstream's:
``error preparing devices for claim '<ns>/<name>:<uid>': <cause>``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import structlog

from imexdra.api.constants import DRIVER_NAME
from imexdra.common.errors import DriverError, PermanentError, RetryLaterError, decisive_error
from imexdra.common.files import flock
from imexdra.common.observability.logging import log_context
from imexdra.common.pacing.pulse import Pulse
from imexdra.dra.driver import PrepareResult, UnprepareResult
from imexdra.dra.resourceclaim import ClaimRef, ResourceClaim
from imexdra.kubeletplugin import metrics
from imexdra.kubeletplugin.devicestate import DeviceState
from imexdra.kubeletplugin.retries import DEFAULT_POLICY, Attempt, Done, Retry, RetryPolicy, run_until_done

_log = structlog.get_logger(__name__)

LOCK_TIMEOUT = 10.0

_R = TypeVar("_R", PrepareResult, UnprepareResult)


class ClaimError(DriverError):
    """The final error of one claim, as reported to the kubelet."""


class ImexDriver:
    """Prepares and unprepares claims on this node; safe for concurrent calls."""

    def __init__(
        self,
        state: DeviceState,
        lock_path: Path,
        *,
        policy: RetryPolicy = DEFAULT_POLICY,
        lock_timeout: float = LOCK_TIMEOUT,
        wake: Pulse | None = None,
    ) -> None:
        self._state = state
        self._lock_path = lock_path
        self._policy = policy
        self._lock_timeout = lock_timeout
        #: Fired when what a retry waits for may have changed (``retries.run_until_done``).
        self._wake = wake

    async def prepare(self, claims: Sequence[ResourceClaim]) -> Mapping[str, PrepareResult]:
        """Prepare each claim; claims given up on within the budget are left out."""
        attempts = [(claim.ref.uid, self._prepare_attempt(claim)) for claim in claims]
        return await self._call(metrics.OPERATION_PREPARE, attempts)

    async def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, UnprepareResult]:
        """Unprepare each claim; unknown claims succeed."""
        attempts = [(ref.uid, self._unprepare_attempt(ref)) for ref in claims]
        return await self._call(metrics.OPERATION_UNPREPARE, attempts)

    async def _call(self, operation: str, attempts: list[tuple[str, Attempt[_R]]]) -> dict[str, _R]:
        labels = {"driver": DRIVER_NAME, "operation": operation}
        inflight = metrics.REQUESTS_INFLIGHT.labels(**labels)
        inflight.inc()
        started = time.monotonic()
        try:
            results = await run_until_done(attempts, self._policy, wake=self._wake)
        finally:
            inflight.dec()
            metrics.REQUEST_DURATION.labels(**labels).observe(time.monotonic() - started)
        if len(results) == len(attempts) and all(r.error is None for r in results.values()):
            metrics.REQUESTS.labels(**labels).inc()
        return results

    def _prepare_attempt(self, claim: ResourceClaim) -> Attempt[PrepareResult]:
        ref = claim.ref
        errors = metrics.PREPARE_ERRORS

        async def attempt() -> Done[PrepareResult] | Retry:
            with log_context(claim=str(ref), operation=metrics.OPERATION_PREPARE):
                try:
                    async with flock.hold(self._lock_path, acquire_timeout=self._lock_timeout):
                        devices = await self._state.prepare(claim)
                except flock.LockError as error:
                    errors.labels(driver=DRIVER_NAME, error_type=metrics.ERROR_LOCK_ACQUIRE).inc()
                    return _retry(f"error acquiring prep/unprep lock: {error}")
                except Exception as error:
                    errors.labels(driver=DRIVER_NAME, error_type=metrics.ERROR_PREPARE_DEVICES).inc()
                    final = _final(f"error preparing devices for claim '{ref}'", error)
                    return Done(PrepareResult(error=final)) if final else _retry(str(error))
                _log.info(f"Prepared devices for claim '{ref}'", devices=[d.device_name for d in devices])
                return Done(PrepareResult(devices=devices))

        return attempt

    def _unprepare_attempt(self, ref: ClaimRef) -> Attempt[UnprepareResult]:
        errors = metrics.UNPREPARE_ERRORS

        async def attempt() -> Done[UnprepareResult] | Retry:
            with log_context(claim=str(ref), operation=metrics.OPERATION_UNPREPARE):
                try:
                    async with flock.hold(self._lock_path, acquire_timeout=self._lock_timeout):
                        await self._state.unprepare(ref)
                except flock.LockError as error:
                    errors.labels(driver=DRIVER_NAME, error_type=metrics.ERROR_LOCK_ACQUIRE).inc()
                    return _retry(f"error acquiring prep/unprep lock: {error}")
                except Exception as error:
                    errors.labels(driver=DRIVER_NAME, error_type=metrics.ERROR_UNPREPARE_DEVICES).inc()
                    final = _final(f"error unpreparing devices for claim '{ref}'", error)
                    return Done(UnprepareResult(error=final)) if final else _retry(str(error))
                _log.info(f"Unprepared devices for claim '{ref}'")
                return Done(UnprepareResult())

        return attempt


def _final(context: str, error: Exception) -> ClaimError | None:
    """The claim's final error if ``error`` ends this call (logged as such), else None."""
    decisive = decisive_error(error)
    if isinstance(decisive, PermanentError):
        _log.error(f"Permanent error: {context}", error=str(error))
    elif isinstance(decisive, RetryLaterError):
        _log.warning(f"Reported for a later retry: {context}", error=str(error))
    else:
        return None
    return ClaimError(f"{context}: {error}")


def _retry(reason: str) -> Retry:
    _log.info("Retrying", reason=reason)
    return Retry(reason)
