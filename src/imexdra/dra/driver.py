"""The seam between the gRPC layer and a driver: what the kubelet asks and what the driver answers.

The gRPC servers (``nodeservice``, ``server``) translate kubelet calls into these plain types and call
a ``Driver``; they know nothing about what it prepares (the IMEX driver is
``imexdra.kubeletplugin.driver``). The driver answers per claim: a result for a claim that is done
(devices, or an error that stops the kubelet's retry for this call), and no entry at all for a claim
it gave up on within the call's budget (docs/errors.md §3.3).

Claims arrive decoded (``resourceclaim``). ``ClaimGetter`` is the one Kubernetes API dependency of
the gRPC layer (the library's step (1), GET each ResourceClaim before preparing); it is injected so
the kube client can be wired in later.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from imexdra.dra.resourceclaim import ClaimRef, ResourceClaim


@dataclass(frozen=True, slots=True)
class Device:
    """One prepared device as reported to the kubelet."""

    requests: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]
    share_id: str | None = None


@dataclass(frozen=True, slots=True)
class PrepareResult:
    """A finished prepare of one claim: its devices, or the error that ended it."""

    devices: tuple[Device, ...] = ()
    error: Exception | None = None


@dataclass(frozen=True, slots=True)
class UnprepareResult:
    """A finished unprepare of one claim; ``error`` is None on success."""

    error: Exception | None = None


class Driver(Protocol):
    """What the kubelet plugin needs from the driver. Calls may run concurrently."""

    async def prepare(self, claims: Sequence[ResourceClaim]) -> Mapping[str, PrepareResult]:
        """Prepare ``claims``; return results keyed by claim UID (omit claims given up on)."""
        ...

    async def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, UnprepareResult]:
        """Unprepare ``claims`` (unknown ones succeed); return results keyed by claim UID."""
        ...


class ClaimGetter(Protocol):
    """Fetch a ResourceClaim from the API server, decoded (``resourceclaim.parse_claim``).

    Raise ``MalformedClaimError`` for a claim that does not decode, and any other exception when it
    cannot be read; its text becomes part of the kubelet-visible error.
    """

    async def __call__(self, namespace: str, name: str) -> ResourceClaim:
        """GET ``resourceclaims/<name>`` in ``namespace``."""
        ...
