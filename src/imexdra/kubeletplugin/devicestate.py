"""Prepare and unprepare of one claim: checkpoint lifecycle, config groups and CDI claim specs.

Callers hold ``pu.lock`` (``driver``). Prepare (docs/data-path.md §7):

1. a PrepareCompleted entry is returned as stored — a restarted plugin answers the same;
2. a PrepareAborted entry with an equal status is a permanent "stale prepare";
3. the configs are decoded and validated, daemon claims must be held by their domain's own daemon
   pods (``ConfigApplier.admit``), this node's devices must not be held by another prepared claim,
   and every group's checks that write nothing pass (``ConfigApplier.check``; for a channel claim
   the namespace assertion comes last) — all before anything is written, so a claim that can never
   be prepared leaves no checkpoint entry behind. Upstream records PrepareStarted first; an entry of
   a claim refused for its namespace would carry an unchecked ``domainID`` into unprepare;
4. PrepareStarted is recorded, every config group is applied (``configs.apply``), the claim's CDI spec
   is written atomically when any group has container edits, and PrepareCompleted is recorded with
   the devices. A failure after PrepareStarted leaves that entry, for unprepare or the stale-claim
   cleanup to find.

Unprepare (docs/data-path.md §11): nothing to do for an unknown or PrepareAborted claim; otherwise
undo the groups (the node label goes when no other claim on the node still uses that domain, and only
a ``domainID`` checked against its claim's namespace is acted on: docs/tenancy.md), delete the
claim's CDI spec, then delete a PrepareCompleted entry or turn a PrepareStarted one into a
PrepareAborted tombstone.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import structlog

from imexdra.api.constants import DeviceType
from imexdra.api.opaque import ComputeDomainChannelConfig
from imexdra.common.errors import DriverError, PermanentError, RetryableError
from imexdra.dra.driver import ClaimGetter, Device
from imexdra.dra.resourceclaim import ClaimRef, ResourceClaim, ResourceClaimStatus, recorded_status
from imexdra.kubeletplugin.cdi.files import claim_spec_uids, remove_claim_spec, write_claim_spec
from imexdra.kubeletplugin.cdi.spec import (
    ContainerEdits,
    DriverRoots,
    base_device_id,
    claim_device_id,
    claim_spec,
)
from imexdra.kubeletplugin.checkpoint import store as checkpoint_store
from imexdra.kubeletplugin.checkpoint.model import (
    Checkpoint,
    CheckpointedDevice,
    ClaimState,
    PreparedDevice,
    PreparedDeviceGroup,
)
from imexdra.kubeletplugin.checkpoint.store import CheckpointStore
from imexdra.kubeletplugin.configs.apply import AppliedConfig, ConfigApplier, DomainUser
from imexdra.kubeletplugin.configs.claim import (
    ConfigGroup,
    config_groups,
    non_admin_devices,
    opaque_device_configs,
)
from imexdra.kubeletplugin.slices import AllocatableDevice

_log = structlog.get_logger(__name__)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class DeviceState:
    """The prepared claims of the node; every method expects the caller to hold ``pu.lock``."""

    def __init__(
        self,
        *,
        store: CheckpointStore,
        applier: ConfigApplier,
        allocatable: Mapping[str, AllocatableDevice],
        cdi_root: Path,
        roots: DriverRoots,
        get_claim: ClaimGetter,
        on_change: Callable[[Checkpoint], None] = lambda _checkpoint: None,
        clock: Callable[[], datetime.datetime] = _now,
    ) -> None:
        self._store = store
        self._applier = applier
        self._allocatable = allocatable
        self._cdi_root = cdi_root
        self._roots = roots
        self._get_claim = get_claim
        self._on_change = on_change
        self._clock = clock

    async def prepare(self, claim: ResourceClaim) -> tuple[Device, ...]:
        """Prepare ``claim`` (allocated, as ``dra.nodeservice`` checks; idempotent).

        Raises:
            DriverError: saying whether retrying can help.

        """
        ref, status, status_json = claim.ref, claim.status, claim.status_json
        checkpoint = await self._store.read()
        entry = checkpoint.claims.get(ref.uid)
        if entry is not None and entry.state == ClaimState.PREPARE_COMPLETED:
            return tuple(_reported(device.device) for device in entry.all_devices())
        if (
            entry is not None
            and entry.state == ClaimState.PREPARE_ABORTED
            and checkpoint_store.same_status(entry, status_json)
        ):
            raise PermanentError(f"stale prepare for claim {ref}: claim prepare was already aborted")
        groups = config_groups(status, self._allocatable, strict=True)
        for group in groups:
            group.config.validate()
            await self._applier.admit(group, claim)
        validate_no_overlap(checkpoint, ref.uid, status)
        checked = [await self._applier.check(group, ref, checkpoint) for group in groups]
        await self._update(
            lambda cp: checkpoint_store.mark_prepare_started(
                cp, ref.uid, status=status_json, name=ref.name, namespace=ref.namespace
            )
        )
        applied = [await self._applier.apply(group) for group in checked]
        prepared = tuple(
            _prepared_group(ref.uid, group, done) for group, done in zip(groups, applied, strict=True)
        )
        await self._write_claim_spec(ref.uid, groups, applied)
        await self._update(
            lambda cp: checkpoint_store.mark_prepare_completed(
                cp,
                ref.uid,
                status=status_json,
                name=ref.name,
                namespace=ref.namespace,
                prepared_devices=prepared,
            )
        )
        return tuple(_reported(device.device) for group in prepared for device in group.devices)

    async def unprepare(self, ref: ClaimRef) -> None:
        """Undo ``ref``'s preparation (unknown claims succeed); raise a ``DriverError`` on failure."""
        checkpoint = await self._store.read()
        entry = checkpoint.claims.get(ref.uid)
        if entry is None:
            _log.info("Unprepare noop: claim not found in checkpoint data", claim=str(ref))
            return
        if entry.state == ClaimState.PREPARE_ABORTED:
            _log.info("Unprepare noop: claim in PrepareAborted state", claim=str(ref))
            return
        if entry.state not in (ClaimState.PREPARE_COMPLETED, ClaimState.PREPARE_STARTED):
            raise RetryableError(f"unsupported ClaimCheckpointState: {entry.state!r}")
        status = recorded_status(entry.status)
        if status.allocation is None:
            status = await self._legacy_status(ref)
        users = domain_users(checkpoint, exclude=ref.uid)
        checked = entry.state == ClaimState.PREPARE_COMPLETED
        for group in config_groups(status, self._allocatable, strict=False):
            await self._applier.undo(
                group, namespace=ref.namespace, checked=checked, users=users.get(group.config.domain_id, ())
            )
        # The spec goes before the entry: a plugin killed between the two leaves an entry the
        # kubelet's retry unprepares again, never a spec nothing refers to (docs/data-path.md §11).
        try:
            await remove_claim_spec(self._cdi_root, ref.uid)
        except OSError as error:
            raise RetryableError(f"error deleting CDI spec of claim {ref.uid}: {error}") from error
        if entry.state == ClaimState.PREPARE_COMPLETED:
            await self._update(lambda cp: checkpoint_store.delete_claim(cp, ref.uid))
        else:
            now = self._clock()
            await self._update(
                lambda cp: checkpoint_store.mark_prepare_aborted(
                    cp, ref.uid, name=ref.name, namespace=ref.namespace, now=now
                )
            )
            _log.info(f"Marked claim PrepareAborted in checkpoint: {ref}", claim=str(ref))

    async def remove_orphaned_claim_specs(self) -> list[str]:
        """Delete claim CDI specs whose claim has no live checkpoint entry; return their UIDs.

        Callers hold ``pu.lock``: a prepare writes its spec between PrepareStarted and
        PrepareCompleted, so under the lock every legitimate spec has a live entry.
        """
        checkpoint = await self._store.read()
        live = {
            uid
            for uid, entry in checkpoint.claims.items()
            if entry.state in (ClaimState.PREPARE_STARTED, ClaimState.PREPARE_COMPLETED)
        }
        orphans = sorted(set(claim_spec_uids(self._cdi_root)) - live)
        for uid in orphans:
            await remove_claim_spec(self._cdi_root, uid)
        return orphans

    async def delete_expired_aborted(self) -> int:
        """Forget PrepareAborted tombstones older than their TTL; return how many went."""
        now = self._clock()
        removed: list[int] = []
        await self._update(lambda cp: removed.append(checkpoint_store.delete_expired_aborted(cp, now=now)))
        return removed[0]

    async def _update(self, mutate: Callable[[Checkpoint], object]) -> None:
        def apply(checkpoint: Checkpoint) -> Checkpoint:
            mutate(checkpoint)
            return checkpoint

        try:
            self._on_change(await self._store.update(apply))
        except OSError as error:
            raise RetryableError(f"error writing checkpoint {self._store.path}: {error}") from error

    async def _write_claim_spec(
        self, uid: str, groups: Sequence[ConfigGroup], applied: Sequence[AppliedConfig]
    ) -> None:
        devices: list[tuple[str, ContainerEdits]] = [
            (device.name, done.edits)
            for group, done in zip(groups, applied, strict=True)
            if not done.edits.is_empty()
            for device in group.devices
        ]
        if not devices:
            return
        spec = claim_spec(uid, devices, roots=self._roots)
        try:
            await write_claim_spec(self._cdi_root, uid, spec)
        except OSError as error:
            raise RetryableError(f"error writing CDI spec of claim {uid}: {error}") from error

    async def _legacy_status(self, ref: ClaimRef) -> ResourceClaimStatus:
        # Entries converted from old checkpoints carry no status: the API server has to say what
        # was allocated, and if it cannot, nothing can be undone safely (permanent, docs/errors.md §3.5).
        try:
            claim = await self._get_claim(ref.namespace, ref.name)
        except Exception as error:
            raise PermanentError(
                f"error fetching ResourceClaim {ref} for a legacy checkpoint entry: {error}"
            ) from error
        if claim.status.allocation is None:
            raise PermanentError(f"ResourceClaim {ref} has no allocation (legacy checkpoint entry)")
        return claim.status


def _prepared_group(uid: str, group: ConfigGroup, applied: AppliedConfig) -> PreparedDeviceGroup:
    has_edits = not applied.edits.is_empty()
    devices = []
    for result, device in zip(group.results, group.devices, strict=True):
        cdi_ids = [] if device.type == DeviceType.CHANNEL else [base_device_id()]
        if has_edits:
            cdi_ids.append(claim_device_id(uid, device.name))
        record = CheckpointedDevice(
            requests=(result.request,),
            pool_name=result.pool,
            device_name=result.device,
            cdi_device_ids=tuple(cdi_ids),
        )
        devices.append(PreparedDevice(type=device.type, id=device.id, device=record))
    return PreparedDeviceGroup(devices=tuple(devices), config_state=applied.config_state)


def validate_no_overlap(checkpoint: Checkpoint, uid: str, status: ResourceClaimStatus) -> None:
    """Fail (retryably) if another prepared claim holds one of ``status``'s devices (docs/data-path.md §7.3).

    Admin-access allocations on either side, other drivers, the same claim and claims that are not
    PrepareCompleted are ignored.
    """
    wanted = non_admin_devices(status)
    for other_uid, other in checkpoint.claims.items():
        if other_uid == uid or other.state != ClaimState.PREPARE_COMPLETED:
            continue
        for device in sorted(wanted & non_admin_devices(recorded_status(other.status))):
            # The other claim may be another namespace's: its UID goes to our log only (docs/tenancy.md).
            _log.info("Device held by another prepared claim", device=device, holder=other_uid)
            raise RetryableError(f"requested device {device} is already allocated to a different claim")


def domain_users(checkpoint: Checkpoint, *, exclude: str) -> dict[str, list[DomainUser]]:
    """The claims on this node (other than ``exclude``) whose channel configs name each domain.

    PrepareCompleted claims count as checked; PrepareStarted ones as recorded, for ``undo`` to check.
    """
    users: dict[str, list[DomainUser]] = {}
    for uid, claim in checkpoint.claims.items():
        if uid == exclude:
            continue
        if claim.state == ClaimState.PREPARE_COMPLETED:
            domains = {
                group.config_state.compute_domain
                for group in claim.prepared_devices
                if group.config_state.type == DeviceType.CHANNEL.value
            }
        elif claim.state == ClaimState.PREPARE_STARTED:
            try:
                configs = opaque_device_configs(recorded_status(claim.status), strict=False)
            except DriverError:
                continue  # it never got past decoding, so it never labelled the node
            domains = {
                c.config.domain_id for c in configs if isinstance(c.config, ComputeDomainChannelConfig)
            }
        else:
            continue
        user = DomainUser(claim.namespace, checked=claim.state == ClaimState.PREPARE_COMPLETED)
        for domain in domains:
            users.setdefault(domain, []).append(user)
    return users


def _reported(record: CheckpointedDevice) -> Device:
    """The kubelet-facing view of a checkpointed device record."""
    return Device(
        requests=record.requests or (),
        pool_name=record.pool_name,
        device_name=record.device_name,
        cdi_device_ids=record.cdi_device_ids or (),
        share_id=record.share_id,
    )
