"""Clique-ID discovery rules (docs/hardware.md §6.1), NVML error classification and version checks."""

import uuid

import pytest
import structlog.testing

from imexdra.common.errors import PermanentError, RetryableError
from imexdra.devices.nvml import (
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    FabricError,
    FabricInfo,
    FabricNotReadyError,
    FabricState,
    Gpu,
    NvmlError,
    NvmlUnavailableError,
    clique_id,
    driver_version_at_least,
    nvml_error,
)

CLUSTER = uuid.UUID("7c9a3e1f-0d2b-4c5e-8f6a-1b2c3d4e5f60")
OTHER_CLUSTER = uuid.UUID("11111111-2222-3333-4444-555555555555")


def fabric(
    cluster: uuid.UUID = CLUSTER, clique: int = 32766, state: int = FabricState.COMPLETED, status: int = 0
) -> FabricInfo:
    return FabricInfo(cluster_uuid=cluster.bytes, clique_id=clique, state=state, status=status)


def gpus(*fabrics: FabricInfo | None, name: str = "NVIDIA GB200") -> list[Gpu]:
    return [Gpu(index=i, uuid=f"GPU-{i}", name=name, fabric=f) for i, f in enumerate(fabrics)]


@pytest.mark.parametrize(
    ("devices", "expected"),
    [
        (gpus(fabric(), fabric(), fabric(), fabric()), f"{CLUSTER}.32766"),
        (gpus(None, None, None, None), ""),
        (gpus(fabric(state=FabricState.NOT_SUPPORTED)), ""),
        (gpus(fabric(cluster=uuid.UUID(int=0))), ""),
        (gpus(None, fabric(clique=7)), f"{CLUSTER}.7"),
        (
            [*gpus(fabric()), Gpu(index=9, uuid="GPU-d", name="DGX Display", fabric=fabric(clique=1))],
            f"{CLUSTER}.32766",
        ),
        ([], ""),
    ],
    ids=[
        "all-agree",
        "not-supported",
        "state-not-supported",
        "zero-cluster-uuid",
        "mixed-with-unsupported",
        "display-skipped",
        "no-gpus",
    ],
)
def test_clique_id_strict(devices: list[Gpu], expected: str) -> None:
    """Strict mode yields <clusterUUID>.<cliqueId>, or "" when no GPU is on a multi-node fabric."""
    assert clique_id(devices) == expected


def test_clique_id_uses_lower_case_canonical_uuid() -> None:
    """The cluster UUID renders as lower-case 8-4-4-4-12, whatever the bytes."""
    raw = bytes(range(0xA0, 0xB0))
    got = clique_id(gpus(FabricInfo(cluster_uuid=raw, clique_id=3, state=FabricState.COMPLETED)))
    assert got == "a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf.3"


@pytest.mark.parametrize(
    ("devices", "error_type", "message"),
    [
        (gpus(fabric(), fabric(clique=1)), FabricError, "unexpected number of unique ClusterUUIDs/CliqueIDs"),
        (gpus(fabric(), fabric(cluster=OTHER_CLUSTER)), FabricError, "unexpected number of unique"),
        (gpus(fabric(state=FabricState.IN_PROGRESS)), FabricNotReadyError, "state=2, refusing to start"),
        (
            gpus(fabric(state=FabricState.NOT_STARTED)),
            FabricNotReadyError,
            "NVLink fabric not attached (device 0/GPU-0)",
        ),
        (gpus(fabric(status=NVML_ERROR_DRIVER_NOT_LOADED)), FabricError, "NVLink fabric registration error"),
    ],
    ids=["clique-disagrees", "cluster-disagrees", "in-progress", "not-started", "registration-error"],
)
def test_clique_id_strict_errors(devices: list[Gpu], error_type: type[Exception], message: str) -> None:
    """Strict mode refuses disagreeing GPUs, incomplete registration and registration errors."""
    with pytest.raises(error_type, match=message.replace("(", r"\(").replace(")", r"\)")):
        clique_id(devices)


def test_fabric_errors_are_classified() -> None:
    """Disagreement is permanent, an unfinished registration is retryable."""
    assert issubclass(FabricError, PermanentError)
    assert issubclass(FabricNotReadyError, RetryableError)


@pytest.mark.parametrize(
    "devices",
    [
        gpus(fabric(state=FabricState.IN_PROGRESS), fabric()),
        gpus(fabric(status=NVML_ERROR_DRIVER_NOT_LOADED), fabric()),
    ],
    ids=["in-progress", "registration-error"],
)
def test_clique_id_legacy_mode_skips_unattached(devices: list[Gpu]) -> None:
    """With strict mode off, GPUs not fabric-attached are skipped instead of failing, with a warning."""
    with structlog.testing.capture_logs() as logs:
        assert clique_id(devices, strict=False) == f"{CLUSTER}.32766"
    [warning] = [entry for entry in logs if entry["log_level"] == "warning"]
    assert (warning["device"], warning["uuid"]) == (0, "GPU-0")
    assert "without a clique" in warning["event"]


def test_clique_id_tolerates_incomplete_on_single_node_nvswitch() -> None:
    """The FabricManagerPartitioning exception skips incomplete registration but still fails on errors."""
    assert clique_id(gpus(fabric(state=FabricState.IN_PROGRESS)), tolerate_incomplete=True) == ""
    with pytest.raises(FabricError):
        clique_id(gpus(fabric(status=5)), tolerate_incomplete=True)


@pytest.mark.parametrize(
    ("code", "error_type"),
    [(NVML_ERROR_LIBRARY_NOT_FOUND, NvmlUnavailableError), (NVML_ERROR_DRIVER_NOT_LOADED, NvmlError)],
    ids=["library-missing-permanent", "driver-not-loaded-retryable"],
)
def test_nvml_error_classification(code: int, error_type: type[Exception]) -> None:
    """A missing library cannot be fixed by retrying; a driver that is not loaded yet can."""
    error = nvml_error("nvmlInitWithFlags", code, "boom")
    assert type(error) is error_type
    assert error.code == code
    assert "nvmlInitWithFlags failed: boom" in str(error)


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("570.158.01", True),
        ("570.170.01", True),
        ("570.158.1", True),
        ("570.86.10", False),
        ("550.163.01", False),
        ("580", True),
    ],
    ids=["equal", "newer-patch", "no-leading-zero", "older-minor", "older-major", "major-only"],
)
def test_driver_version_at_least(version: str, expected: bool) -> None:
    """Versions compare numerically per component against the IMEXDaemonsWithDNSNames minimum."""
    assert driver_version_at_least(version, "570.158.01") is expected


def test_driver_version_garbage_is_permanent() -> None:
    """An unparseable version string is a permanent error naming the input."""
    with pytest.raises(PermanentError, match=r"'570\.x'"):
        driver_version_at_least("570.x", "570.158.01")
