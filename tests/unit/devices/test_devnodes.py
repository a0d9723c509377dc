"""NVIDIA device-node discovery under a dev root (the base CDI spec's device list)."""

from pathlib import Path

import pytest

from imexdra.devices.devnodes import nvidia_device_nodes
from imexdra.devices.procfs import DeviceDiscoveryError

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
    for name in names:
        path = root / "dev" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    return root


def test_fake_dev_root_lists_nvidia_nodes(tmp_path: Path) -> None:
    """On simulated nodes regular files stand in; excluded families and non-NVIDIA files are skipped."""
    found = nvidia_device_nodes(make_dev(tmp_path, FAKE_DEV), require_char_device=False)
    assert [path for path, _ in found] == sorted(
        "/dev/" + name
        for name in FAKE_DEV
        if not name.startswith(("nvidia-fs", "nvidia-nvswitch", "nvidia-nvlink", "null"))
    )
    assert dict(found)["/dev/nvidia0"] == tmp_path / "dev" / "nvidia0"


def test_real_mode_requires_char_devices(tmp_path: Path) -> None:
    """By default only character devices count, so a dev root of regular files has none."""
    with pytest.raises(DeviceDiscoveryError, match="no NVIDIA device nodes found"):
        nvidia_device_nodes(make_dev(tmp_path, ["nvidia0"]))


@pytest.mark.skipif(not Path("/dev/null").is_char_device(), reason="needs a real /dev/null")
def test_real_char_device_is_found(tmp_path: Path) -> None:
    """A character device named like an NVIDIA node is found (a symlink to /dev/null stands in)."""
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidiactl").symlink_to("/dev/null")
    assert nvidia_device_nodes(tmp_path) == [("/dev/nvidiactl", tmp_path / "dev" / "nvidiactl")]


def test_empty_dev_root_is_an_error(tmp_path: Path) -> None:
    """No NVIDIA nodes at all is upstream's startup-fatal "no NVIDIA device nodes found"."""
    with pytest.raises(DeviceDiscoveryError, match="no NVIDIA device nodes found"):
        nvidia_device_nodes(tmp_path, require_char_device=False)
