"""The prepared-claims checkpoint (V2), byte-compatible with the upstream Go plugin.

Owns the in-memory model (``Checkpoint`` → ``PreparedClaim`` → groups → devices), its exact JSON
layout, the two checksums, and reading every format upstream reads (docs/compatibility.md §2.5):

- writing (``marshal``): regenerate ``v1`` from ``v2`` (PrepareCompleted claims only), then the
  top-level checksum over ``{"checksum":0,"v1":...}`` and v2's own over v2 with ``"checksum":0``;
- reading (``unmarshal``): V2, V1-only (all claims become PrepareCompleted) and the 25.3.0-rc2
  legacy layout; both checksums are verified, first against our canonical re-encoding (what Go does)
  and then against the file's own bytes (tolerates numbers we would spell differently).

File handling (atomic writes, locking, corrupt files, boot IDs) lives in ``checkpoint.store``.
"""

from __future__ import annotations

import datetime
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from imexdra.api.constants import DeviceType
from imexdra.common.errors import PermanentError
from imexdra.dra import gojson
from imexdra.dra.claimstatus import canonical_claim_status
from imexdra.dra.gojson import JsonValue


class ClaimState(enum.StrEnum):
    """``checkpointState`` values; unknown strings from other versions are kept as plain ``str``."""

    UNSET = ""
    PREPARE_STARTED = "PrepareStarted"
    PREPARE_COMPLETED = "PrepareCompleted"
    PREPARE_ABORTED = "PrepareAborted"


class CorruptCheckpointError(PermanentError):
    """The checkpoint cannot be trusted: unparseable, unknown layout, or a checksum mismatch."""


@dataclass(frozen=True, slots=True)
class CheckpointedDevice:
    """The kubelet-facing device record (keys ``Requests``, ``PoolName``, ... as in Go)."""

    requests: tuple[str, ...] | None
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...] | None
    share_id: str | None = None
    metadata: JsonValue = None


@dataclass(frozen=True, slots=True)
class PreparedDevice:
    """One prepared channel or daemon: its ID (``info.id``) and its device record."""

    type: DeviceType
    id: int
    device: CheckpointedDevice


@dataclass(frozen=True, slots=True)
class ConfigState:
    """The persisted part of a config group's state (keys ``Type``, ``ComputeDomain``)."""

    type: str
    compute_domain: str


@dataclass(frozen=True, slots=True)
class PreparedDeviceGroup:
    """The devices prepared under one opaque config object."""

    devices: tuple[PreparedDevice, ...]
    config_state: ConfigState


@dataclass(frozen=True, slots=True)
class PreparedClaim:
    """One claim's entry; ``status`` is the canonical ResourceClaimStatus (see ``dra.claimstatus``)."""

    state: str
    status: dict[str, JsonValue] = field(default_factory=dict)
    prepared_devices: tuple[PreparedDeviceGroup, ...] = ()
    name: str = ""
    namespace: str = ""
    aborted_at: datetime.datetime | None = None

    def all_devices(self) -> list[PreparedDevice]:
        """Every prepared device across groups, in order."""
        return [device for group in self.prepared_devices for device in group.devices]


@dataclass(slots=True)
class Checkpoint:
    """All prepared claims by UID, and the boot ID the records are valid for."""

    claims: dict[str, PreparedClaim] = field(default_factory=dict)
    node_boot_id: str = ""


# --- writing -------------------------------------------------------------------------------------


def marshal(checkpoint: Checkpoint) -> bytes:
    """The file content for ``checkpoint``: exactly the bytes the Go plugin would write."""
    v1 = gojson.encode(_v1_tree(checkpoint))
    top_checksum = gojson.checksum(b'{"checksum":0,"v1":' + v1 + b"}")
    # v2's first member is its checksum: encode once with 0, checksum that, then splice the value in.
    v2_unsummed = gojson.encode(_v2_tree(checkpoint, checksum=0))
    v2 = b'{"checksum":%d' % gojson.checksum(v2_unsummed) + v2_unsummed[len(b'{"checksum":0') :]
    return b'{"checksum":%d,"v1":' % top_checksum + v1 + b',"v2":' + v2 + b"}"


def _v2_tree(checkpoint: Checkpoint, *, checksum: int) -> dict[str, JsonValue]:
    tree: dict[str, JsonValue] = {"checksum": checksum}
    if checkpoint.claims:
        tree["preparedClaims"] = {
            uid: _claim_tree(checkpoint.claims[uid]) for uid in sorted(checkpoint.claims)
        }
    if checkpoint.node_boot_id:
        tree["nodeBootID"] = checkpoint.node_boot_id
    return tree


def _v1_tree(checkpoint: Checkpoint) -> dict[str, JsonValue]:
    completed = {
        uid: claim for uid, claim in checkpoint.claims.items() if claim.state == ClaimState.PREPARE_COMPLETED
    }
    if not completed:
        return {}
    claims: dict[str, JsonValue] = {}
    for uid in sorted(completed):
        entry: dict[str, JsonValue] = {"status": completed[uid].status}
        if completed[uid].prepared_devices:
            entry["preparedDevices"] = [_group_tree(g) for g in completed[uid].prepared_devices]
        claims[uid] = entry
    return {"preparedClaims": claims}


def _claim_tree(claim: PreparedClaim) -> dict[str, JsonValue]:
    tree: dict[str, JsonValue] = {"checkpointState": str(claim.state), "status": claim.status}
    if claim.prepared_devices:
        tree["preparedDevices"] = [_group_tree(group) for group in claim.prepared_devices]
    if claim.name:
        tree["name"] = claim.name
    if claim.namespace:
        tree["namespace"] = claim.namespace
    if claim.aborted_at is not None:
        tree["abortedAt"] = format_time(claim.aborted_at)
    return tree


def _group_tree(group: PreparedDeviceGroup) -> dict[str, JsonValue]:
    return {
        "devices": [_device_tree(device) for device in group.devices],
        "configState": {"Type": group.config_state.type, "ComputeDomain": group.config_state.compute_domain},
    }


def _device_tree(device: PreparedDevice) -> dict[str, JsonValue]:
    record = device.device
    inner: dict[str, JsonValue] = {
        "Requests": list(record.requests) if record.requests is not None else None,
        "PoolName": record.pool_name,
        "DeviceName": record.device_name,
        "CDIDeviceIDs": list(record.cdi_device_ids) if record.cdi_device_ids is not None else None,
    }
    if record.share_id is not None:
        inner["ShareID"] = record.share_id
    if record.metadata is not None:
        inner["Metadata"] = record.metadata
    prepared = {"info": {"id": device.id}, "device": inner}
    return {
        "channel": prepared if device.type == DeviceType.CHANNEL else None,
        "daemon": prepared if device.type == DeviceType.DAEMON else None,
    }


def format_time(moment: datetime.datetime) -> str:
    """metav1.Time's JSON form: RFC3339 in UTC with whole seconds, e.g. ``2026-01-02T03:04:05Z``."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- reading -------------------------------------------------------------------------------------


def unmarshal(data: bytes) -> Checkpoint:
    """Parse and verify a checkpoint file of any supported layout.

    Raises:
        CorruptCheckpointError: not JSON, an unknown layout, or a checksum that does not verify.

    """
    try:
        text = data.decode("utf-8")
        top = gojson.loads(text)
        members = gojson.object_members(text)
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        raise CorruptCheckpointError(f"checkpoint is not valid JSON: {error}") from error
    if not isinstance(top, dict):
        raise CorruptCheckpointError("checkpoint is not a JSON object")
    try:
        v1 = top.get("v1")
        if isinstance(v1, dict) and _is_legacy(v1):
            checkpoint = _from_legacy(v1)
        else:
            v2 = top.get("v2")
            checkpoint = _from_v2(v2) if v2 is not None else _from_v1(v1 or {})
            _verify_v2(text, members, v2, checkpoint)
        _verify_top(text, members, top)
    except (AttributeError, KeyError, TypeError, ValueError, RecursionError) as error:
        # Any shape Go's decoder would reject (a list where an object belongs, a missing field).
        raise CorruptCheckpointError(f"checkpoint has an unexpected layout: {error!r}") from error
    return checkpoint


def _verify_top(text: str, members: Mapping[str, tuple[int, int]], top: dict[str, Any]) -> None:
    # The top-level checksum covers {"checksum":0,"v1":...} with v1 as stored (omitted when absent).
    raw_v1 = _raw(text, members, "v1")
    v1: Any = top.get("v1")
    has_v1 = raw_v1 is not None and v1 is not None
    own_bytes = ('{"checksum":0' + (f',"v1":{raw_v1}' if has_v1 else "") + "}").encode()
    candidates = [own_bytes]
    if has_v1 and not _is_legacy(v1):
        candidates.insert(0, gojson.encode({"checksum": 0, "v1": _v1_tree(_from_v1(v1))}))
    elif not has_v1:
        candidates.insert(0, gojson.encode({"checksum": 0}))
    _verify("top-level", top.get("checksum"), candidates)


def _verify_v2(text: str, members: Mapping[str, tuple[int, int]], v2: Any, cp: Checkpoint) -> None:
    if v2 is None:
        return
    start, end = members["v2"]
    inner = gojson.object_members(text, start)
    if "checksum" not in inner:
        raise CorruptCheckpointError("v2 checkpoint has no checksum")
    c_start, c_end = inner["checksum"]
    own_bytes = (text[start:c_start] + "0" + text[c_end:end]).encode()
    _verify("v2", v2["checksum"], [gojson.encode(_v2_tree(cp, checksum=0)), own_bytes])


def _verify(section: str, stored: Any, candidates: list[bytes]) -> None:
    if not isinstance(stored, int) or isinstance(stored, bool):
        raise CorruptCheckpointError(f"{section} checksum is missing or not an integer")
    if all(gojson.checksum(candidate) != stored for candidate in candidates):
        raise CorruptCheckpointError(
            f"checkpoint is corrupted: {section} checksum {stored} does not match the content "
            f"(computed {gojson.checksum(candidates[0])})"
        )


def _raw(text: str, members: Mapping[str, tuple[int, int]], key: str) -> str | None:
    span = members.get(key)
    return text[span[0] : span[1]] if span else None


def _from_v2(v2: Any) -> Checkpoint:
    claims = v2.get("preparedClaims") or {}
    return Checkpoint(
        claims={uid: _claim_from_tree(entry) for uid, entry in claims.items()},
        node_boot_id=str(v2.get("nodeBootID") or ""),
    )


def _from_v1(v1: Any) -> Checkpoint:
    claims = v1.get("preparedClaims") or {}
    return Checkpoint(
        claims={
            uid: PreparedClaim(
                state=ClaimState.PREPARE_COMPLETED,
                status=canonical_claim_status(entry.get("status")),
                prepared_devices=_groups(entry.get("preparedDevices")),
            )
            for uid, entry in claims.items()
        }
    )


def _claim_from_tree(entry: Mapping[str, Any]) -> PreparedClaim:
    aborted = entry.get("abortedAt")
    return PreparedClaim(
        state=_state(entry.get("checkpointState") or ""),
        status=canonical_claim_status(entry.get("status")),
        prepared_devices=_groups(entry.get("preparedDevices")),
        name=str(entry.get("name") or ""),
        namespace=str(entry.get("namespace") or ""),
        aborted_at=parse_time(aborted) if aborted else None,
    )


def _state(value: str) -> str:
    try:
        return ClaimState(value)
    except ValueError:
        return value


def _groups(groups: Any, *, legacy: bool = False) -> tuple[PreparedDeviceGroup, ...]:
    return tuple(
        PreparedDeviceGroup(
            devices=tuple(_device_from_tree(device, legacy=legacy) for device in group.get("devices") or ()),
            config_state=ConfigState(
                type=str(group["configState"].get("Type", "")),
                compute_domain=str(group["configState"].get("ComputeDomain", "")),
            ),
        )
        for group in groups or ()
    )


def _device_from_tree(tree: Mapping[str, Any], *, legacy: bool) -> PreparedDevice:
    present = [kind for kind in DeviceType if tree.get(kind.value) is not None]
    if len(present) != 1:
        raise ValueError(f"prepared device must be exactly one of channel/daemon, got {sorted(tree)}")
    prepared = tree[present[0].value]
    record = prepared["device"]
    return PreparedDevice(
        type=present[0],
        id=int(prepared["info"]["id"]),
        device=_legacy_record(record) if legacy else _record(record),
    )


def _record(record: Mapping[str, Any]) -> CheckpointedDevice:
    requests = record.get("Requests")
    cdi_ids = record.get("CDIDeviceIDs")
    return CheckpointedDevice(
        requests=tuple(requests) if requests is not None else None,
        pool_name=str(record.get("PoolName") or ""),
        device_name=str(record.get("DeviceName") or ""),
        cdi_device_ids=tuple(cdi_ids) if cdi_ids is not None else None,
        share_id=record.get("ShareID"),
        metadata=record.get("Metadata"),
    )


def _legacy_record(record: Mapping[str, Any]) -> CheckpointedDevice:
    # 25.3.0-rc2 stored the protobuf Device with its proto JSON names, all omitempty.
    requests = record.get("request_names")
    cdi_ids = record.get("cdi_device_ids")
    return CheckpointedDevice(
        requests=tuple(requests) if requests else None,
        pool_name=str(record.get("pool_name") or ""),
        device_name=str(record.get("device_name") or ""),
        cdi_device_ids=tuple(cdi_ids) if cdi_ids else None,
    )


def _is_legacy(v1: Mapping[str, Any]) -> bool:
    claims = v1.get("preparedClaims")
    return isinstance(claims, dict) and any(isinstance(entry, list) for entry in claims.values())


def _from_legacy(v1: Mapping[str, Any]) -> Checkpoint:
    claims = v1.get("preparedClaims") or {}
    return Checkpoint(
        claims={
            uid: PreparedClaim(
                state=ClaimState.PREPARE_COMPLETED,
                status=canonical_claim_status(None),
                prepared_devices=_groups(groups, legacy=True),
            )
            for uid, groups in claims.items()
        }
    )


def parse_time(value: str) -> datetime.datetime:
    """Parse an RFC3339 timestamp as metav1.Time does (``Z`` or a numeric offset)."""
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(datetime.UTC)
