"""The NVML boundary: the GPU facts the driver reads, and the clique-ID rules built on them.

Owns the ``Nvml`` Protocol — implemented by ``nvml_real.PynvmlNvml`` (on GPU hosts, and on simulated
nodes over the mock library) and by ``imexdra_sim.devices.nvml_fake.FakeNvml`` in unit tests — the
per-GPU snapshot types, the errors NVML failures become, and ``clique_id()``: upstream's clique
discovery (docs/hardware.md §6.1) as a pure function, so both backends share one implementation of the rules
and the rules are testable without a GPU.

A clique ID is ``<clusterUUID>.<cliqueId>`` (lower-case canonical UUID, decimal clique), or ``""`` when
the node has no multi-node NVLink fabric. ``Nvml`` calls block: async callers use
``asyncio.to_thread``.
"""

from __future__ import annotations

import enum
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import structlog

from imexdra.common.errors import PermanentError, RetryableError

_log = structlog.get_logger(__name__)

# NVML return codes this package branches on (values from nvml.h).
NVML_SUCCESS = 0
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999

# Failures that retrying on the same install cannot fix.
_PERMANENT_CODES = frozenset({NVML_ERROR_LIBRARY_NOT_FOUND, NVML_ERROR_FUNCTION_NOT_FOUND})

# Display adapters on DGX stations have no fabric and are skipped by upstream discovery.
SKIPPED_DEVICE_NAMES = frozenset({"DGX Display", "NVIDIA DGX Display"})

ZERO_CLUSTER_UUID = bytes(16)


class FabricState(enum.IntEnum):
    """``nvmlGpuFabricState_t``: where a GPU is in NVLink fabric registration."""

    NOT_SUPPORTED = 0
    NOT_STARTED = 1
    IN_PROGRESS = 2
    COMPLETED = 3


@dataclass(frozen=True, slots=True)
class FabricInfo:
    """One GPU's ``nvmlDeviceGetGpuFabricInfo`` answer.

    ``status`` is the NVML return code of the fabric registration itself (0 = success).
    """

    cluster_uuid: bytes
    clique_id: int
    state: int
    status: int = NVML_SUCCESS

    @property
    def cluster_uuid_text(self) -> str:
        """The cluster UUID as a lower-case canonical 8-4-4-4-12 string."""
        return str(uuid.UUID(bytes=self.cluster_uuid))


@dataclass(frozen=True, slots=True)
class Gpu:
    """One GPU as NVML enumerates it; ``fabric`` is None when the driver reports NOT_SUPPORTED."""

    index: int
    uuid: str
    name: str
    fabric: FabricInfo | None


class Nvml(Protocol):
    """What the driver asks NVML. Each call initialises and shuts down NVML, as upstream does."""

    def gpus(self) -> list[Gpu]:
        """Every GPU with its fabric info; raises ``NvmlError`` when NVML fails."""
        ...

    def driver_version(self) -> str:
        """The kernel driver version, e.g. ``570.158.01``."""
        ...


class NvmlError(RetryableError):
    """An NVML call failed; ``code`` is the NVML return code."""

    def __init__(self, message: str, *, code: int) -> None:
        super().__init__(message)
        self.code = code


class NvmlUnavailableError(PermanentError):
    """NVML cannot be used on this install at all (library or symbol missing)."""

    def __init__(self, message: str, *, code: int) -> None:
        super().__init__(message)
        self.code = code


class FabricError(PermanentError):
    """The NVLink fabric is misconfigured: registration failed or GPUs disagree on the clique."""


class FabricNotReadyError(RetryableError):
    """A GPU's NVLink fabric registration has not completed yet."""


def nvml_error(operation: str, code: int, description: str) -> NvmlError | NvmlUnavailableError:
    """Build the error for a failed NVML ``operation``, classified by its return ``code``."""
    message = f"NVML {operation} failed: {description} (code {code})"
    if code in _PERMANENT_CODES:
        return NvmlUnavailableError(message, code=code)
    return NvmlError(message, code=code)


def clique_id(gpus: Sequence[Gpu], *, strict: bool = True, tolerate_incomplete: bool = False) -> str:
    """Derive the node's clique ID from its GPUs, following upstream's discovery rules.

    ``strict`` is gate ``CrashOnNVLinkFabricErrors`` (default on): an incomplete registration or a
    registration error is an error instead of "this GPU has no fabric". ``tolerate_incomplete`` is the
    ``FabricManagerPartitioning`` single-node NVSwitch exception: incomplete registration is skipped.
    NOT_SUPPORTED (call or state) and an all-zero cluster UUID always mean "no clique" for that GPU.

    Raises:
        FabricNotReadyError: strict mode, a GPU's fabric registration is still in progress.
        FabricError: strict mode and a registration error, or GPUs disagree on cluster UUID/clique.

    """
    seen: set[tuple[str, int]] = set()
    for gpu in gpus:
        if gpu.name in SKIPPED_DEVICE_NAMES:
            continue
        fabric = gpu.fabric
        if fabric is None or fabric.state == FabricState.NOT_SUPPORTED:
            _log.info("No-clique fallback: NVLink fabric not supported", device=gpu.index, uuid=gpu.uuid)
            continue
        where = f"device {gpu.index}/{gpu.uuid}"
        if fabric.state != FabricState.COMPLETED:
            if strict and not tolerate_incomplete:
                raise FabricNotReadyError(
                    f"NVLink fabric not attached ({where}): state={fabric.state}, refusing to start"
                )
            _log.warning(
                "NVLink fabric not attached; treating the GPU as without a clique",
                device=gpu.index,
                uuid=gpu.uuid,
                state=str(fabric.state),
                reason="FabricManagerPartitioning"
                if tolerate_incomplete
                else "CrashOnNVLinkFabricErrors=false",
            )
            continue
        if fabric.status != NVML_SUCCESS:
            if strict:
                raise FabricError(
                    f"NVLink fabric registration error ({where}): status={fabric.status}, refusing to start"
                )
            # Said at warning level: the node then joins no clique, which an operator must be able to see.
            _log.warning(
                "NVLink fabric registration error ignored (CrashOnNVLinkFabricErrors=false); "
                "treating the GPU as without a clique",
                device=gpu.index,
                uuid=gpu.uuid,
                status=fabric.status,
            )
            continue
        if fabric.cluster_uuid == ZERO_CLUSTER_UUID:
            continue
        cluster = fabric.cluster_uuid_text
        _log.info(
            "identified fabric clique UUID/ID",
            device=gpu.index,
            uuid=gpu.uuid,
            cluster_uuid=cluster,
            clique_id=fabric.clique_id,
        )
        seen.add((cluster, fabric.clique_id))
    if not seen:
        return ""
    if len(seen) > 1:
        found = ", ".join(f"{cluster}.{clique}" for cluster, clique in sorted(seen))
        raise FabricError(f"unexpected number of unique ClusterUUIDs/CliqueIDs found on devices: {found}")
    ((cluster, clique),) = seen
    return f"{cluster}.{clique}"


_VERSION_PART = re.compile(r"^\d+$")


def driver_version_at_least(version: str, minimum: str) -> bool:
    """Compare dotted numeric driver versions (``570.158.01`` style; leading zeros ignored).

    Raises:
        PermanentError: ``version`` is not a dotted list of numbers.

    """
    return _version_tuple(version) >= _version_tuple(minimum)


def _version_tuple(version: str) -> tuple[int, ...]:
    parts = version.strip().split(".")
    if not parts or not all(_VERSION_PART.match(part) for part in parts):
        raise PermanentError(f"could not parse driver version {version!r}")
    return tuple(int(part) for part in parts)
