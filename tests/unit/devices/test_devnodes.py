"""NVIDIA device-node discovery under a dev root (the base CDI spec's device list)."""

from pathlib import Path

import pytest

from imexdra.devices.devnodes import nvidia_device_nodes
from imexdra.devices.procfs import DeviceDiscoveryError
from imexdra_sim.devices.driverroot_fake import make_char_device

FAKE_DEV = [
    "nvidia0",
    "nvidia1",
    "nvidiactl",
    "nvidia-uvm",
    "nvidia-uvm-tools",
    "nvidia-modeset",
    "nvidia-caps/nvidia-cap1",
    "nvidia-caps/nvidia-cap2",
    "nvidia-caps-imex-channels/channel0",
    "nvidia-caps-imex-channels/channel1",
    "nvidia-fs0",
    "nvidia-nvswitch0",
    "nvidia-nvlink",
    "null",
]


def make_dev(root: Path, names: list[str]) -> Path:
    for minor, name in enumerate(names):
        make_char_device(root / "dev" / name, 195, minor)
    return root


def test_dev_root_lists_nvidia_char_devices(tmp_path: Path) -> None:
    """NVIDIA character devices are listed; excluded families and non-NVIDIA nodes are skipped."""
    found = nvidia_device_nodes(make_dev(tmp_path, FAKE_DEV))
    assert [path for path, _ in found] == sorted(
        "/dev/" + name
        for name in FAKE_DEV
        if not name.startswith(("nvidia-fs", "nvidia-nvswitch", "nvidia-nvlink", "null"))
    )
    assert dict(found)["/dev/nvidia0"] == tmp_path / "dev" / "nvidia0"


def test_regular_files_are_not_device_nodes(tmp_path: Path) -> None:
    """Only character devices count, so a dev root of regular files has none."""
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidia0").write_text("")
    with pytest.raises(DeviceDiscoveryError, match="no NVIDIA device nodes found"):
        nvidia_device_nodes(tmp_path)


@pytest.mark.skipif(not Path("/dev/null").is_char_device(), reason="needs a real /dev/null")
def test_real_char_device_is_found(tmp_path: Path) -> None:
    """A character device named like an NVIDIA node is found (a symlink to /dev/null stands in)."""
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidiactl").symlink_to("/dev/null")
    assert nvidia_device_nodes(tmp_path) == [("/dev/nvidiactl", tmp_path / "dev" / "nvidiactl")]


def test_empty_dev_root_is_an_error(tmp_path: Path) -> None:
    """No NVIDIA nodes at all is upstream's startup-fatal "no NVIDIA device nodes found"."""
    with pytest.raises(DeviceDiscoveryError, match="no NVIDIA device nodes found"):
        nvidia_device_nodes(tmp_path)
