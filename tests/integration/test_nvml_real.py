"""The real NVML backend (``devices/nvml_real.py``, over nvidia-ml-py) against our mock libnvidia-ml.so.1.

Nothing between ``PynvmlNvml`` and the C ABI is faked: the pinned pynvml loads the mock library built by
sim/nvml-mock/build.sh through ctypes, and the library answers from the ``nvml-mock-profile`` beside it
(docs/nvml-mock.md). Each test copies the library into its own directory next to its profile.

Every case runs in a fresh Python process (``nvml_probe.py``). pynvml keeps one library handle per
process (``pynvml.nvmlLib``, plus a cache of resolved symbols) and ``PynvmlNvml`` only sets that handle
when it is still empty — as in the plugin, which loads one library for its lifetime. Resetting pynvml's
private globals in-process would test a state no real process is in; a process per case costs a few
hundred milliseconds and keeps each case's library, profile and NVML session its own.

Covered: the entry points the library exports versus those pynvml resolves; a GB200 tray's GPUs and
clique ID; the defaults; each fabric state; fabric call NOT_SUPPORTED; fabric status errors; GPUs that
disagree; NVML errors from init, count, driver version and each per-GPU call (permanent vs retryable);
codes pynvml has no text for; a failing shutdown; a profile changed between sessions; a library that is
missing, not a library, or not NVML; the mock's own refusal of a bad or missing profile; and the
driver root a simulated node gets (``devices.driverroot_fake``) read back as the tray it describes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from imexdra.devices.driverroot import find_nvml_library
from imexdra_sim.devices import driverroot_fake
from imexdra_sim.localcluster.binaries import NVML_MOCK_LIBRARY, nvml_mock_library

PROBE = Path(__file__).with_name("nvml_probe.py")
PROFILE = "nvml-mock-profile"

CLUSTER = "7c9a3e1f-0d2b-4c5e-8f6a-1b2c3d4e5f60"
CLIQUE = 32766
CLIQUE_ID = f"{CLUSTER}.{CLIQUE}"
RACK = f"fabric.cluster_uuid={CLUSTER}\nfabric.clique_id={CLIQUE}\n"

STATES = {"not_supported": 0, "not_started": 1, "in_progress": 2, "completed": 3}  # nvml.h values

GPUS: dict[str, Any] = {"call": "gpus"}
DRIVER_VERSION: dict[str, Any] = {"call": "driver_version"}


def clique(**options: bool) -> dict[str, Any]:
    return {"call": "clique_id", **options}


@dataclass(frozen=True)
class Probe:
    outcomes: list[Any]
    stderr: str


Tray = Callable[[str | None], Path]
Run = Callable[..., Probe]


@pytest.fixture(scope="module")
def mock_library() -> Path:
    return nvml_mock_library()


@pytest.fixture
def tray(tmp_path: Path, mock_library: Path) -> Tray:
    """Make a directory holding a copy of the library and the given profile (None: no profile)."""

    def make(profile: str | None) -> Path:
        directory = tmp_path / "tray"
        directory.mkdir()
        library = directory / NVML_MOCK_LIBRARY
        shutil.copyfile(mock_library, library)
        if profile is not None:
            (directory / PROFILE).write_text(profile)
        return library

    return make


@pytest.fixture
def run(tmp_path: Path) -> Run:
    """Run the probe's steps against ``library`` in a fresh process."""

    def probe(library: Path | str, *steps: dict[str, Any]) -> Probe:
        request, out = tmp_path / "request.json", tmp_path / "outcomes.json"
        request.write_text(json.dumps({"library": str(library), "out": str(out), "steps": list(steps)}))
        done = subprocess.run(
            [sys.executable, str(PROBE), str(request)], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        return Probe(json.loads(out.read_text()), done.stderr)

    return probe


def value(outcome: dict[str, Any]) -> Any:
    assert "error" not in outcome, outcome["error"]
    return outcome["value"]


def error(outcome: dict[str, Any]) -> dict[str, Any]:
    assert "value" not in outcome, outcome["value"]
    return dict(outcome["error"])


def exported_symbols(library: Path) -> list[str]:
    listing = subprocess.run(
        ["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True, check=True
    )
    return sorted(line.split()[2] for line in listing.stdout.splitlines() if line.split()[1] == "T")


UPSTREAM_ONLY = ["nvmlInit_v2"]
"""Exported for upstream's kubelet plugin (go-nvml's init); pynvml never resolves it (docs/nvml-mock.md)."""


def test_exports_exactly_what_pynvml_resolves(tray: Tray, run: Run) -> None:
    """The library exports the C symbols pynvml looks up for every call nvml_real makes, plus upstream's."""
    library = tray("error.nvmlSystemGetDriverVersion=NOT_READY\n")  # a code pynvml asks the text of
    probe = run(library, GPUS, DRIVER_VERSION, {"resolved": True})
    assert error(probe.outcomes[1])["code"] == 27
    assert sorted(probe.outcomes[2] + UPSTREAM_ONLY) == exported_symbols(library)
    assert probe.outcomes[2] == [
        "nvmlDeviceGetCount_v2",
        "nvmlDeviceGetGpuFabricInfo",
        "nvmlDeviceGetHandleByIndex_v2",
        "nvmlDeviceGetName",
        "nvmlDeviceGetUUID",
        "nvmlErrorString",
        "nvmlInitWithFlags",
        "nvmlShutdown",
        "nvmlSystemGetDriverVersion",
    ]


def test_gb200_tray_from_its_profile(tray: Tray, run: Run) -> None:
    """Each GPU's UUID, name and fabric info arrive intact, in index order, and NVML is shut down after."""
    uuids = [f"GPU-5e1c0a2b-77d0-4f3e-9a61-0c8d4b2e7f{i:02x}" for i in range(4)]
    library = tray(
        "# compute tray 7 of the rack\ndriver_version = 580.65.06\n"
        + RACK
        + "".join(f"gpu.{i}.uuid={uuid}\n" for i, uuid in enumerate(uuids))
        + "gpu.3.name=NVIDIA GB200 NVL\n"
    )
    gpus, version, found = run(library, GPUS, DRIVER_VERSION, clique()).outcomes
    fabric = {"cluster_uuid": CLUSTER.replace("-", ""), "clique_id": CLIQUE, "state": 3, "status": 0}
    assert value(gpus) == [
        {"index": i, "uuid": uuid, "name": "NVIDIA GB200" if i < 3 else "NVIDIA GB200 NVL", "fabric": fabric}
        for i, uuid in enumerate(uuids)
    ]
    assert value(version) == "580.65.06"
    assert value(found) == CLIQUE_ID
    assert [gpus["session_open"], version["session_open"], found["session_open"]] == [False] * 3


def test_empty_profile_is_a_standalone_tray(tray: Tray, run: Run) -> None:
    """An empty profile: 4 NVIDIA GB200s, fabric completed with a zero cluster UUID, so no clique."""
    gpus, found, version = run(tray(""), GPUS, clique(), DRIVER_VERSION).outcomes
    assert [(gpu["index"], gpu["name"]) for gpu in value(gpus)] == [(i, "NVIDIA GB200") for i in range(4)]
    assert len({gpu["uuid"] for gpu in value(gpus)}) == 4
    assert {gpu["fabric"]["state"] for gpu in value(gpus)} == {3}
    assert value(found) == ""
    assert value(version) == "570.170.01"


@pytest.mark.parametrize(
    ("state", "options", "expected"),
    [
        ("not_supported", {}, ""),
        ("not_started", {}, "FabricNotReadyError"),
        ("in_progress", {}, "FabricNotReadyError"),
        ("completed", {}, CLIQUE_ID),
        ("in_progress", {"strict": False}, ""),
        ("not_started", {"tolerate_incomplete": True}, ""),
    ],
    ids=["not-supported", "not-started", "in-progress", "completed", "lenient", "fm-partitioning"],
)
def test_fabric_state(tray: Tray, run: Run, state: str, options: dict[str, bool], expected: str) -> None:
    """Each nvmlGpuFabricState_t value (byte 24 of the struct) on every GPU reaches the clique rules."""
    (outcome,) = run(tray(RACK + f"fabric.state={state}\n"), clique(**options)).outcomes
    if expected.endswith("Error"):
        assert error(outcome)["type"] == expected
        assert not error(outcome)["permanent"]
        assert f"state={STATES[state]}," in outcome["error"]["message"]
    else:
        assert value(outcome) == expected


@pytest.mark.parametrize(
    ("profile", "fabrics", "expected"),
    [
        ("gpu.2.error.nvmlDeviceGetGpuFabricInfo=NOT_SUPPORTED\n", [True, True, False, True], CLIQUE_ID),
        ("error.nvmlDeviceGetGpuFabricInfo=3\n", [False] * 4, ""),
    ],
    ids=["one-gpu", "every-gpu"],
)
def test_fabric_call_not_supported(
    tray: Tray, run: Run, profile: str, fabrics: list[bool], expected: str
) -> None:
    """A fabric call answering NOT_SUPPORTED means no fabric on that GPU, not an error."""
    gpus, found = run(tray(RACK + profile), GPUS, clique()).outcomes
    assert [gpu["fabric"] is not None for gpu in value(gpus)] == fabrics
    assert value(found) == expected


@pytest.mark.parametrize(
    ("status", "strict", "expected"),
    [("NOT_READY", True, "FabricError"), ("999", True, "FabricError"), ("UNKNOWN", False, CLIQUE_ID)],
    ids=["not-ready", "unknown-strict", "unknown-lenient"],
)
def test_fabric_status_error(tray: Tray, run: Run, status: str, strict: bool, expected: str) -> None:
    """A registration status error on one GPU is a permanent FabricError, or skips that GPU if lenient."""
    (outcome,) = run(tray(RACK + f"gpu.0.fabric.status={status}\n"), clique(strict=strict)).outcomes
    if expected == "FabricError":
        assert error(outcome)["type"] == expected
        assert error(outcome)["permanent"]
        assert "registration error (device 0/" in outcome["error"]["message"]
    else:
        assert value(outcome) == expected


def test_gpus_in_two_cliques(tray: Tray, run: Run) -> None:
    """GPUs of one tray reporting different cliques are a permanent FabricError naming both."""
    (outcome,) = run(tray(RACK + "gpu.3.fabric.clique_id=7\n"), clique()).outcomes
    assert error(outcome)["type"] == "FabricError"
    assert f"{CLUSTER}.7" in outcome["error"]["message"]
    assert CLIQUE_ID in outcome["error"]["message"]


@pytest.mark.parametrize(
    ("code", "kind", "permanent"),
    [
        ("DRIVER_NOT_LOADED", "NvmlError", False),
        ("NO_PERMISSION", "NvmlError", False),
        ("LIB_RM_VERSION_MISMATCH", "NvmlError", False),
        ("UNKNOWN", "NvmlError", False),
        ("FUNCTION_NOT_FOUND", "NvmlUnavailableError", True),
        ("LIBRARY_NOT_FOUND", "NvmlUnavailableError", True),
    ],
    ids=["driver-not-loaded", "no-permission", "rm-mismatch", "unknown", "no-function", "no-library"],
)
def test_init_error(tray: Tray, run: Run, code: str, kind: str, permanent: bool) -> None:
    """nvmlInitWithFlags failing maps to the right error class for both calls, and no session is left."""
    for outcome in run(tray(f"error.nvmlInitWithFlags={code}\n"), GPUS, DRIVER_VERSION).outcomes:
        assert error(outcome)["type"] == kind
        assert error(outcome)["permanent"] is permanent
        assert outcome["error"]["message"].startswith("NVML nvmlInitWithFlags failed")
        assert outcome["session_open"] is False


@pytest.mark.parametrize(
    ("line", "operation"),
    [
        ("error.nvmlDeviceGetCount_v2=GPU_IS_LOST", "nvmlDeviceGetCount"),
        ("gpu.2.error.nvmlDeviceGetHandleByIndex_v2=GPU_IS_LOST", "nvmlDeviceGetHandleByIndex"),
        ("gpu.2.error.nvmlDeviceGetUUID=GPU_IS_LOST", "nvmlDeviceGetUUID"),
        ("gpu.2.error.nvmlDeviceGetName=GPU_IS_LOST", "nvmlDeviceGetName"),
        ("gpu.2.error.nvmlDeviceGetGpuFabricInfo=GPU_IS_LOST", "nvmlDeviceGetGpuFabricInfo"),
    ],
    ids=["count", "handle", "uuid", "name", "fabric"],
)
def test_gpu_call_error(tray: Tray, run: Run, line: str, operation: str) -> None:
    """A failing enumeration call is a retryable NvmlError naming the call, and NVML is shut down."""
    (outcome,) = run(tray(f"{line}\n"), GPUS).outcomes
    assert error(outcome) == {
        "type": "NvmlError",
        "code": 15,
        "permanent": False,
        "message": f"NVML {operation} failed: GPU is lost (code 15)",
    }
    assert outcome["session_open"] is False


def test_driver_version_error(tray: Tray, run: Run) -> None:
    """nvmlSystemGetDriverVersion failing is a retryable NvmlError; the GPUs still enumerate."""
    version, gpus = run(
        tray("error.nvmlSystemGetDriverVersion=NO_PERMISSION\n"), DRIVER_VERSION, GPUS
    ).outcomes
    assert error(version)["type"] == "NvmlError"
    assert error(version)["code"] == 4
    assert "nvmlSystemGetDriverVersion" in version["error"]["message"]
    assert len(value(gpus)) == 4


def test_code_without_pynvml_text_is_described_by_the_library(tray: Tray, run: Run) -> None:
    """For codes pynvml has no text for, the message carries the library's own nvmlErrorString."""
    (outcome,) = run(tray("gpu.0.error.nvmlDeviceGetName=IN_USE\n"), GPUS).outcomes
    assert error(outcome)["message"] == "NVML nvmlDeviceGetName failed: In use (code 19)"


def test_failing_shutdown_does_not_hide_the_answer(tray: Tray, run: Run) -> None:
    """An nvmlShutdown error after a good session is ignored: the answer is returned."""
    (outcome,) = run(tray(RACK + "error.nvmlShutdown=UNKNOWN\n"), clique()).outcomes
    assert value(outcome) == CLIQUE_ID
    assert outcome["session_open"] is True  # the mock did not shut down, as its profile said


def test_profile_is_read_again_each_session(tray: Tray, run: Run) -> None:
    """Every call is a new NVML session, so a fabric that completes between two calls is seen."""
    library = tray(RACK + "fabric.state=in_progress\n")
    first, second = run(
        library, clique(), {"write": str(library.parent / PROFILE), "text": RACK}, clique()
    ).outcomes
    assert error(first)["type"] == "FabricNotReadyError"
    assert value(second) == CLIQUE_ID


@pytest.mark.parametrize(
    ("case", "code"),
    [("missing", 12), ("not-a-library", 12), ("not-nvml", 13)],
    ids=["missing", "not-a-library", "not-nvml"],
)
def test_unusable_library(run: Run, tmp_path: Path, case: str, code: int) -> None:
    """A library path that is missing, not a shared object, or lacks NVML is a permanent error."""
    library = tmp_path / NVML_MOCK_LIBRARY
    if case == "not-a-library":
        library.write_text("driver_version=570.170.01\n")
    # libm is a real shared library (loaded by soname) without a single NVML symbol.
    (outcome,) = run("libm.so.6" if case == "not-nvml" else library, GPUS).outcomes
    assert error(outcome)["type"] == "NvmlUnavailableError"
    assert error(outcome)["code"] == code
    assert error(outcome)["permanent"]


@pytest.mark.parametrize(
    ("profile", "complaint"),
    [
        (None, f"{PROFILE}: cannot read the profile: No such file or directory"),
        ("gpu_count=4\nfabric.clique=3\n", f"{PROFILE}:2: unknown fabric field: fabric.clique"),
        ("gpu_count=2\ngpu.2.name=x\n", f"{PROFILE}:2: GPU index out of range (see gpu_count): gpu.2.name"),
        ("fabric.cluster_uuid=7c9a3e1f\n", f"{PROFILE}:1: expected a UUID like"),
        ("gpu.0.error.nvmlShutdown=3\n", f"{PROFILE}:1: not a per-GPU entry point"),
        ("error.nvmlInit=3\n", f"{PROFILE}:1: not an entry point of this library"),
        ("fabric.state=done\n", f"{PROFILE}:1: expected not_supported, not_started"),
        ("driver_version\n", f"{PROFILE}:1: expected key=value: driver_version"),
    ],
    ids=["missing", "unknown-key", "gpu-index", "uuid", "not-per-gpu", "symbol", "state", "no-equals"],
)
def test_bad_profile_fails_init_loudly(tray: Tray, run: Run, profile: str | None, complaint: str) -> None:
    """The mock refuses a missing or malformed profile: init fails and stderr names file, line and key."""
    library = tray(profile)
    probe = run(library, GPUS)
    (outcome,) = probe.outcomes
    assert error(outcome)["code"] == 999
    assert outcome["error"]["message"].startswith("NVML nvmlInitWithFlags failed")
    assert f"nvml-mock: {library.parent}/{complaint}" in probe.stderr


@pytest.mark.parametrize("fabric", [True, False], ids=["rack-tray", "no-fabric-tray"])
def test_simulated_node_driver_root(tmp_path: Path, mock_library: Path, run: Run, fabric: bool) -> None:
    """A simulated node's driver root (driverroot_fake) reads back as its tray: nvml_real, nvidia-smi -L."""
    tray = driverroot_fake.Tray("gb200-07", driverroot_fake.Fabric(CLUSTER, CLIQUE) if fabric else None)
    root = driverroot_fake.write_driver_root(tmp_path / "driver-root", tray, nvml_library=mock_library)
    library = find_nvml_library(root)
    # Laid out as a driver installs it: the versioned file, and the soname as a relative link to it.
    versioned = f"libnvidia-ml.so.{driverroot_fake.DRIVER_VERSION}"
    link = root / driverroot_fake.NVML_LIBRARY_DIR / NVML_MOCK_LIBRARY
    assert link.readlink() == Path(versioned)
    assert library.resolve() == (link.parent / versioned).resolve()
    assert not (link.parent / versioned).is_symlink()
    smi = subprocess.run(
        [root / driverroot_fake.IMEX_BINARY_DIR / driverroot_fake.NVIDIA_SMI, "-L"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert smi.stdout.splitlines() == [
        f"GPU {i}: NVIDIA GB200 (UUID: {driverroot_fake.gpu_uuid('gb200-07', i)})" for i in range(4)
    ]
    gpus, version, found = run(library, GPUS, DRIVER_VERSION, clique()).outcomes
    assert [gpu["uuid"] for gpu in value(gpus)] == [driverroot_fake.gpu_uuid("gb200-07", i) for i in range(4)]
    assert {gpu["name"] for gpu in value(gpus)} == {"NVIDIA GB200"}
    assert value(version) == driverroot_fake.DRIVER_VERSION
    if fabric:
        assert value(found) == CLIQUE_ID
    else:
        assert value(found) == ""
        assert [gpu["fabric"] for gpu in value(gpus)] == [None] * 4
