"""The parts of a ``resource.k8s.io/v1`` ResourceClaim the plugin reads, decoded once where they enter.

A claim enters the plugin at two edges: a GET from the API server (``parse_claim``, called by
``claims.api_claim_getter``) and a status read back from the checkpoint (``recorded_status``). Both
bring the status into Go's canonical form first (``claimstatus``: the form the checkpoint records,
and the form Go's decoder would have produced), then convert it into the structs below. Everything
after an edge takes these types; nothing checks JSON shapes by hand.

The struct and field names are those of k8s.io/api/resource/v1 (``DeviceRequestAllocationResult``,
``DeviceAllocationConfiguration``, ...). Only what the plugin reads is modelled; the whole status still
travels with the claim in canonical JSON (``ResourceClaim.status_json``) for the checkpoint, so no
field is lost.

A claim or status that does not have the shape of the API type (a list where an object belongs, a
number where a request name belongs) is a ``MalformedClaimError``: permanent, since no retry can change
the input (docs/errors.md §3.5).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from imexdra.common.errors import PermanentError
from imexdra.dra.claimstatus import canonical_claim_status
from imexdra.dra.gojson import JsonValue


class MalformedClaimError(PermanentError):
    """A ResourceClaim (or a recorded status) that does not have the shape of the API type."""


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """A ResourceClaim's identity as the kubelet sends it."""

    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        """Upstream's claim string, ``<namespace>/<name>:<uid>``."""
        return f"{self.namespace}/{self.name}:{self.uid}" if self.uid else f"{self.namespace}/{self.name}"


class DeviceRequestAllocationResult(msgspec.Struct, frozen=True, rename="camel"):
    """One ``status.allocation.devices.results[]`` entry: a device allocated for a request."""

    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool | None = None


class OpaqueDeviceConfiguration(msgspec.Struct, frozen=True):
    """A driver's opaque config; ``parameters`` stays JSON, for ``api.opaque.decode_opaque_config``."""

    driver: str
    parameters: Any = None


class DeviceAllocationConfiguration(msgspec.Struct, frozen=True):
    """One ``status.allocation.devices.config[]`` entry; empty ``requests`` means every request."""

    source: str
    requests: tuple[str, ...] = ()
    opaque: OpaqueDeviceConfiguration | None = None


class DeviceAllocationResult(msgspec.Struct, frozen=True):
    """``status.allocation.devices``."""

    results: tuple[DeviceRequestAllocationResult, ...] = ()
    config: tuple[DeviceAllocationConfiguration, ...] = ()


class AllocationResult(msgspec.Struct, frozen=True):
    """``status.allocation``."""

    devices: DeviceAllocationResult = DeviceAllocationResult()


class ResourceClaimConsumerReference(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One ``status.reservedFor[]`` entry: who may use the claim."""

    api_group: str = ""
    resource: str
    name: str
    uid: str


class ResourceClaimStatus(msgspec.Struct, frozen=True, rename="camel"):
    """``status``: the allocation (None until the scheduler allocated) and its consumers."""

    allocation: AllocationResult | None = None
    reserved_for: tuple[ResourceClaimConsumerReference, ...] = ()


class _ObjectMeta(msgspec.Struct, frozen=True):
    name: str = ""
    namespace: str = ""
    uid: str = ""


@dataclass(frozen=True, slots=True)
class ResourceClaim:
    """A claim as the plugin reads it: identity, typed status, and the whole status for the checkpoint."""

    ref: ClaimRef
    status: ResourceClaimStatus
    #: The whole status in Go's canonical form, as the checkpoint records it (``claimstatus``).
    status_json: dict[str, JsonValue]


def parse_claim(obj: object) -> ResourceClaim:
    """The ResourceClaim in ``obj`` (parsed JSON, as the API server serves it).

    Raises:
        MalformedClaimError: ``obj`` is not shaped as a ResourceClaim.

    """
    if not isinstance(obj, dict):
        raise MalformedClaimError(f"malformed ResourceClaim: expected an object, got {type(obj).__name__}")
    try:
        meta = msgspec.convert(obj.get("metadata") or {}, _ObjectMeta)
    except msgspec.ValidationError as error:
        raise MalformedClaimError(f"malformed ResourceClaim metadata: {error}") from error
    return resource_claim(ClaimRef(meta.namespace, meta.name, meta.uid), obj.get("status"))


def resource_claim(ref: ClaimRef, status: object) -> ResourceClaim:
    """The claim ``ref`` with ``status`` (parsed JSON; None or ``{}`` when it has none yet).

    Raises:
        MalformedClaimError: ``status`` is not shaped as a ResourceClaimStatus.

    """
    try:
        status_json = canonical_claim_status(status)
    except ValueError as error:
        raise MalformedClaimError(f"malformed ResourceClaim status: {error}") from error
    return ResourceClaim(ref=ref, status=recorded_status(status_json), status_json=status_json)


def recorded_status(status_json: dict[str, JsonValue]) -> ResourceClaimStatus:
    """The typed view of a status in canonical form (as the checkpoint records it).

    Raises:
        MalformedClaimError: a field has a type the API type does not allow.

    """
    try:
        return msgspec.convert(status_json, ResourceClaimStatus)
    except msgspec.ValidationError as error:
        raise MalformedClaimError(f"malformed ResourceClaim status: {error}") from error
