"""A simulated node's hardware files: driver root layout, mock NVML profile, IMEX programs, /proc/devices."""

import zipfile
from pathlib import Path

import pytest

from imexdra.devices.devnodes import nvidia_device_nodes
from imexdra.devices.driverroot import driver_binaries, find_nvml_library
from imexdra.devices.procfs import HostImexDevices
from imexdra_sim.devices.driverroot_fake import (
    NVML_MOCK_PROFILE,
    Fabric,
    Tray,
    gpu_uuid,
    nvml_profile,
    write_driver_root,
    write_node_hardware,
)

CLUSTER = "7c9a3e1f-0d2b-4c5e-8f6a-1b2c3d4e5f60"


def profile_keys(text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))
    return {key: value for key, value in pairs}


def test_rack_tray_profile() -> None:
    """A rack tray: 4 GB200s with UUIDs of their own, fabric registered in the rack's clique."""
    keys = profile_keys(nvml_profile(Tray("gb200-03", Fabric(CLUSTER, 32766))))
    assert keys["gpu_count"] == "4" and keys["name"] == "NVIDIA GB200"
    assert (keys["fabric.cluster_uuid"], keys["fabric.clique_id"], keys["fabric.state"]) == (
        CLUSTER,
        "32766",
        "completed",
    )
    assert [keys[f"gpu.{i}.uuid"] for i in range(4)] == [gpu_uuid("gb200-03", i) for i in range(4)]
    assert "error.nvmlDeviceGetGpuFabricInfo" not in keys


def test_no_fabric_tray_profile() -> None:
    """A tray without NVLink fabric answers the fabric-info call NOT_SUPPORTED, as such GPUs do."""
    keys = profile_keys(nvml_profile(Tray("gb200-02", None)))
    assert keys["error.nvmlDeviceGetGpuFabricInfo"] == "NOT_SUPPORTED"
    assert not [key for key in keys if key.startswith("fabric.")]


def test_gpu_uuids_differ_between_trays() -> None:
    """Two nodes never report the same GPU."""
    assert {gpu_uuid("a", i) for i in range(4)}.isdisjoint({gpu_uuid("b", i) for i in range(4)})


@pytest.mark.parametrize(
    ("text", "expected"),
    [(f"{CLUSTER}.32766", Fabric(CLUSTER, 32766)), (f"{CLUSTER.upper()}.1", Fabric(CLUSTER, 1))],
    ids=["rack", "upper-case"],
)
def test_fabric_from_a_clique_id(text: str, expected: Fabric) -> None:
    """A clique ID splits into cluster UUID and clique number."""
    assert Fabric.parse(text) == expected


def test_driver_root_layout(tmp_path: Path) -> None:
    """The plugin finds a copy of the library with its profile beside it, and the device stand-ins."""
    original = tmp_path / "libnvidia-ml.so.1"
    original.write_bytes(b"\x7fELF mock")
    root = write_driver_root(tmp_path / "root", Tray("n", Fabric(CLUSTER, 5)), nvml_library=original)
    library = find_nvml_library(root)
    assert library.read_bytes() == original.read_bytes()
    assert library != original.resolve() and not library.is_symlink()
    assert "fabric.clique_id=5" in (library.parent / NVML_MOCK_PROFILE).read_text()
    paths = [path for path, _ in nvidia_device_nodes(root)]
    assert "/dev/nvidia-caps-imex-channels/channel0" in paths and "/dev/nvidia3" in paths
    write_driver_root(root, Tray("n", None), nvml_library=original)
    assert "NOT_SUPPORTED" in (library.parent / NVML_MOCK_PROFILE).read_text()


def test_node_hardware_is_what_mock_mode_reads(tmp_path: Path) -> None:
    """/proc/devices and the capability file written for a node are readable by the plugin's procfs code."""
    original = tmp_path / "libnvidia-ml.so.1"
    original.write_bytes(b"mock")
    hardware = write_node_hardware(tmp_path / "node", Tray("n", None), nvml_library=original)
    capability = hardware.driver_root / "proc/driver/nvidia/capabilities/fabric-imex-mgmt"
    devices = HostImexDevices(proc_devices=hardware.proc_devices, fabric_mgmt_capability=capability)
    assert devices.channel(0).path == "/dev/nvidia-caps-imex-channels/channel0"
    assert devices.fabric_mgmt().path == "/dev/nvidia-caps/nvidia-cap512"


@pytest.mark.parametrize("imex", [True, False], ids=["driver-with-imex", "driver-without-imex"])
def test_driver_root_ships_the_fake_imex_programs(tmp_path: Path, imex: bool) -> None:
    """usr/bin/nvidia-imex and nvidia-imex-ctl are the fakes, unless the tray models a broken install."""
    original = tmp_path / "libnvidia-ml.so.1"
    original.write_bytes(b"mock")
    root = write_driver_root(tmp_path / "root", Tray("n", None), nvml_library=original)
    write_driver_root(root, Tray("n", None, imex=imex), nvml_library=original)
    found = driver_binaries(root)
    if imex:
        assert found == {name: root / "usr/bin" / name for name in ("nvidia-imex", "nvidia-imex-ctl")}
        with zipfile.ZipFile(found["nvidia-imex"]) as program:  # a zip app after its #! line
            assert "imexdra_sim/devices/fakeimex/daemon.py" in program.namelist()
    else:
        assert found == {}
