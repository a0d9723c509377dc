"""Driver-root file lookups (upstream TestFindFile table) and the dev-root choice."""

from pathlib import Path

import pytest

from imexdra.devices.driverroot import (
    BINARY_DIRS,
    LIBRARY_DIRS,
    dev_root,
    driver_binaries,
    find_file,
    find_nvml_library,
)
from imexdra.devices.procfs import DeviceDiscoveryError


def touch(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")
    return path


def test_library_found_in_first_search_dir(tmp_path: Path) -> None:
    """The first search directory that holds the file wins."""
    first = touch(tmp_path / "usr/lib64/libnvidia-ml.so.1")
    touch(tmp_path / "lib64/libnvidia-ml.so.1")
    assert find_nvml_library(tmp_path) == first.resolve()


def test_directory_does_not_shadow_file(tmp_path: Path) -> None:
    """A directory named like the library in an earlier dir does not hide the real file later on."""
    (tmp_path / "usr/lib64/libnvidia-ml.so.1").mkdir(parents=True)
    real = touch(tmp_path / "lib/x86_64-linux-gnu/libnvidia-ml.so.1")
    assert find_nvml_library(tmp_path) == real.resolve()


def test_only_directories_is_an_error(tmp_path: Path) -> None:
    """When every candidate is a directory, the lookup fails."""
    (tmp_path / "usr/lib64/libnvidia-ml.so.1").mkdir(parents=True)
    with pytest.raises(DeviceDiscoveryError, match=r"libnvidia-ml\.so\.1 not found"):
        find_file(tmp_path, "libnvidia-ml.so.1", LIBRARY_DIRS)


def test_not_found_is_an_error(tmp_path: Path) -> None:
    """A missing file is a DeviceDiscoveryError naming the file."""
    with pytest.raises(DeviceDiscoveryError, match="nvidia-smi not found"):
        find_file(tmp_path, "nvidia-smi", BINARY_DIRS)


def test_nvidia_smi_in_usr_bin_not_shadowed_by_opt_bin_dir(tmp_path: Path) -> None:
    """A directory at /opt/bin/nvidia-smi does not hide /usr/bin/nvidia-smi."""
    (tmp_path / "opt/bin/nvidia-smi").mkdir(parents=True)
    real = touch(tmp_path / "usr/bin/nvidia-smi")
    assert find_file(tmp_path, "nvidia-smi", BINARY_DIRS) == real.resolve()


def test_result_is_symlink_resolved(tmp_path: Path) -> None:
    """A symlinked library resolves to its target."""
    target = touch(tmp_path / "usr/lib64/libnvidia-ml.so.570.170.01")
    (tmp_path / "usr/lib64/libnvidia-ml.so.1").symlink_to(target.name)
    assert find_nvml_library(tmp_path) == target.resolve()


@pytest.mark.parametrize(
    ("has_dev", "expected_is_root"), [(True, True), (False, False)], ids=["with-dev", "without-dev"]
)
def test_dev_root(tmp_path: Path, has_dev: bool, expected_is_root: bool) -> None:
    """The driver root is the dev root only if it has a dev directory; otherwise it is /."""
    if has_dev:
        (tmp_path / "dev").mkdir()
    assert dev_root(tmp_path) == (tmp_path if expected_is_root else Path("/"))


def executable(path: Path) -> Path:
    touch(path).chmod(0o755)
    return path


def test_driver_binaries_found_in_the_binary_dirs_unresolved(tmp_path: Path) -> None:
    """Each program is found as an executable in the binary dirs; its path is kept as found."""
    imex = executable(tmp_path / "opt/nvidia/nvidia-imex")
    (tmp_path / "usr/bin").mkdir(parents=True)
    (tmp_path / "usr/bin/nvidia-imex").symlink_to("../../opt/nvidia/nvidia-imex")
    ctl = executable(tmp_path / "bin/nvidia-imex-ctl")
    found = driver_binaries(tmp_path)
    assert found == {"nvidia-imex": tmp_path / "usr/bin/nvidia-imex", "nvidia-imex-ctl": ctl}
    assert found["nvidia-imex"].resolve() == imex


@pytest.mark.parametrize(
    "layout",
    ["absent", "not-executable", "directory", "at-the-root-only"],
)
def test_driver_binaries_absent(tmp_path: Path, layout: str) -> None:
    """Missing, non-executable, a directory, or outside the binary dirs: not a driver program."""
    if layout == "not-executable":
        touch(tmp_path / "usr/bin/nvidia-imex").chmod(0o644)
    elif layout == "directory":
        (tmp_path / "usr/bin/nvidia-imex").mkdir(parents=True)
    elif layout == "at-the-root-only":
        executable(tmp_path / "nvidia-imex")
    assert driver_binaries(tmp_path) == {}
