"""The fake NVML node file: defaults, fabric variants, per-GPU overrides and bad files."""

import json
from pathlib import Path

import pytest

from imexdra.common.errors import ConfigError
from imexdra.devices.nvml import FabricState, NvmlError, NvmlUnavailableError, clique_id
from imexdra_sim.devices.nvml_fake import DEFAULT_DRIVER_VERSION, FakeNvml

CLUSTER = "7c9a3e1f-0d2b-4c5e-8f6a-1b2c3d4e5f60"


def node_file(tmp_path: Path, text: str, name: str = "node.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_gb200_tray_defaults(tmp_path: Path) -> None:
    """An empty file is a 4-GPU GB200 tray without fabric: distinct UUIDs, no clique."""
    nvml = FakeNvml(node_file(tmp_path, ""))
    devices = nvml.gpus()
    assert [gpu.index for gpu in devices] == [0, 1, 2, 3]
    assert {gpu.name for gpu in devices} == {"NVIDIA GB200"}
    assert len({gpu.uuid for gpu in devices}) == 4
    assert all(gpu.uuid.startswith("GPU-") and gpu.fabric is None for gpu in devices)
    assert clique_id(devices) == ""
    assert nvml.driver_version() == DEFAULT_DRIVER_VERSION


@pytest.mark.parametrize(
    ("text", "name"),
    [
        (f"fabric:\n  clusterUUID: {CLUSTER}\n  cliqueID: 32766\n", "node.yaml"),
        (json.dumps({"fabric": {"clusterUUID": CLUSTER, "cliqueID": 32766}}), "node.json"),
    ],
    ids=["yaml", "json"],
)
def test_fabric_gives_clique(tmp_path: Path, text: str, name: str) -> None:
    """A fabric block makes every GPU report the same completed registration and so one clique."""
    devices = FakeNvml(node_file(tmp_path, text, name)).gpus()
    assert {gpu.fabric.state for gpu in devices if gpu.fabric} == {FabricState.COMPLETED}
    assert clique_id(devices) == f"{CLUSTER}.32766"


def test_uuids_differ_between_nodes(tmp_path: Path) -> None:
    """Two simulated nodes never share GPU UUIDs (the seed is the node name or file path)."""
    first = FakeNvml(node_file(tmp_path, "nodeName: a\n", "a.yaml")).gpus()
    second = FakeNvml(node_file(tmp_path, "nodeName: b\n", "b.yaml")).gpus()
    assert not {g.uuid for g in first} & {g.uuid for g in second}


def test_per_gpu_overrides(tmp_path: Path) -> None:
    """A gpus list replaces gpuCount; null fabric means NOT_SUPPORTED; omitted inherits the default."""
    text = f"""
fabric: {{clusterUUID: {CLUSTER}, cliqueID: 1}}
gpus:
  - {{uuid: GPU-x, name: NVIDIA DGX Display}}
  - {{fabric: null}}
  - {{fabric: {{clusterUUID: {CLUSTER}, cliqueID: 2, state: inProgress}}}}
"""
    devices = FakeNvml(node_file(tmp_path, text)).gpus()
    assert (devices[0].uuid, devices[0].name) == ("GPU-x", "NVIDIA DGX Display")
    assert devices[0].fabric is not None and devices[0].fabric.clique_id == 1
    assert devices[1].fabric is None
    assert devices[2].fabric is not None and devices[2].fabric.state == FabricState.IN_PROGRESS


def test_file_is_reread_each_call(tmp_path: Path) -> None:
    """Changing the file changes the next answer, so a harness can move a node between cliques."""
    path = node_file(tmp_path, "")
    nvml = FakeNvml(path)
    assert clique_id(nvml.gpus()) == ""
    path.write_text(json.dumps({"fabric": {"clusterUUID": CLUSTER, "cliqueID": 5}}), encoding="utf-8")
    assert clique_id(nvml.gpus()) == f"{CLUSTER}.5"


@pytest.mark.parametrize(
    ("text", "error_type"),
    [
        ("initError: DRIVER_NOT_LOADED\n", NvmlError),
        ("initError: LIBRARY_NOT_FOUND\n", NvmlUnavailableError),
    ],
    ids=["driver-not-loaded", "library-not-found"],
)
def test_init_error_is_injected(tmp_path: Path, text: str, error_type: type[Exception]) -> None:
    """initError makes every call fail like nvmlInit would, with the matching error class."""
    nvml = FakeNvml(node_file(tmp_path, text))
    with pytest.raises(error_type):
        nvml.gpus()
    with pytest.raises(error_type):
        nvml.driver_version()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gpuCont: 4\n", "gpuCont"),
        ("fabric: {clusterUUID: nope, cliqueID: 1}\n", "not a UUID"),
        ("fabric: {clusterUUID: " + CLUSTER + ", cliqueID: 1, state: done}\n", "state"),
        ("[unclosed\n", "not YAML/JSON"),
    ],
    ids=["typo-key", "bad-uuid", "bad-state", "not-yaml"],
)
def test_bad_file_is_config_error(tmp_path: Path, text: str, message: str) -> None:
    """A malformed node file is a ConfigError naming the problem, never a silent no-fabric node."""
    with pytest.raises(ConfigError, match=message):
        FakeNvml(node_file(tmp_path, text)).gpus()


def test_missing_file_is_config_error(tmp_path: Path) -> None:
    """A missing node file is a ConfigError with the path."""
    with pytest.raises(ConfigError, match=r"absent\.yaml"):
        FakeNvml(tmp_path / "absent.yaml").driver_version()
