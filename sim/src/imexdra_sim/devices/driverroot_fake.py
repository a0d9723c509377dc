"""A simulated GB200 compute tray's hardware files: the one writer of a simulated node's driver root.

The driver root is laid out like an NVIDIA driver install (docs/driver-root.md)::

    dev/nvidia0..3, nvidiactl, nvidia-uvm, nvidia-caps/..., nvidia-caps-imex-channels/channel0
    proc/driver/nvidia/capabilities/fabric-imex-mgmt
    proc/driver/nvidia/params       with the driver's ImexChannelCount
    usr/lib64/libnvidia-ml.so.<driver version>   a copy of the mock NVML library (sim/nvml-mock),
    usr/lib64/libnvidia-ml.so.1     and its soname link, relative, as a driver install has them
    usr/lib64/nvml-mock-profile     the tray's GPUs and NVLink fabric, read by that library
    usr/bin/nvidia-imex             the fake IMEX daemon and its control tool (devices.fakeimex),
    usr/bin/nvidia-imex-ctl         which the base CDI spec mounts into IMEX daemon containers
    usr/bin/nvidia-smi              a stand-in answering ``-L`` from the same mock (nvidia_smi_fake)

The device nodes are real character devices (``mknod``) with the numbers the NVIDIA driver gives them;
no driver backs them (a simulated node has no GPU), so opening one fails, but a runtime's CDI code sees
exactly what it sees on a real node. ``write_node_hardware`` writes the fake ``/proc/devices`` that
lists those majors beside the driver root (upstream's mock mode, ``ALT_PROC_DEVICES_PATH``). The
library is copied, never linked: it finds its profile beside its own resolved path
(docs/nvml-mock.md), so each tray needs a file of its own.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import uuid
from dataclasses import dataclass
from pathlib import Path

from imexdra.devices.driverroot import IMEX_BINARIES, NVML_LIBRARY
from imexdra.devices.procfs import IMEX_CHANNEL_COUNT
from imexdra_sim.devices import nvidia_smi_fake
from imexdra_sim.devices.fakeimex.install import install_fake_imex
from imexdra_sim.devices.procfs_fake import (
    DEFAULT_FABRIC_MGMT_MINOR,
    DEFAULT_IMEX_CHANNELS_MAJOR,
    DEFAULT_NVIDIA_CAPS_MAJOR,
    write_driver_params,
    write_fabric_mgmt_capability,
    write_proc_devices,
)

NVIDIA_FRONTEND_MAJOR = 195
NVIDIA_UVM_MAJOR = 508
FAKE_DEVICE_NODES = {
    "nvidia0": (NVIDIA_FRONTEND_MAJOR, 0),
    "nvidia1": (NVIDIA_FRONTEND_MAJOR, 1),
    "nvidia2": (NVIDIA_FRONTEND_MAJOR, 2),
    "nvidia3": (NVIDIA_FRONTEND_MAJOR, 3),
    "nvidiactl": (NVIDIA_FRONTEND_MAJOR, 255),
    "nvidia-uvm": (NVIDIA_UVM_MAJOR, 0),
    "nvidia-caps-imex-channels/channel0": (DEFAULT_IMEX_CHANNELS_MAJOR, 0),
    f"nvidia-caps/nvidia-cap{DEFAULT_FABRIC_MGMT_MINOR}": (
        DEFAULT_NVIDIA_CAPS_MAJOR,
        DEFAULT_FABRIC_MGMT_MINOR,
    ),
}
"""The tray's device nodes and their (major, minor), as the NVIDIA driver numbers them; the majors
of the frontend and UVM are the fake ``/proc/devices``' (``procfs_fake``)."""

FABRIC_MGMT_CAPABILITY = "proc/driver/nvidia/capabilities/fabric-imex-mgmt"
DRIVER_PARAMS = "proc/driver/nvidia/params"
NVML_LIBRARY_DIR = "usr/lib64"
"""First of the directories ``driverroot.find_nvml_library`` searches (a RHEL-style install)."""
NVML_MOCK_PROFILE = "nvml-mock-profile"
IMEX_BINARY_DIR = "usr/bin"
NVIDIA_SMI = "nvidia-smi"
DRIVER_VERSION = "570.170.01"
GPU_NAME = "NVIDIA GB200"
GPUS_PER_TRAY = 4


@dataclass(frozen=True, slots=True)
class Fabric:
    """The NVLink fabric a tray's GPUs registered with: clique ID ``<cluster_uuid>.<clique>``."""

    cluster_uuid: str
    clique: int

    @classmethod
    def parse(cls, clique_id: str) -> Fabric:
        """``Fabric`` from a clique ID such as ``7c9a3e1f-...-1b2c3d4e5f60.32766``."""
        cluster_uuid, _, clique = clique_id.rpartition(".")
        return cls(str(uuid.UUID(cluster_uuid)), int(clique))


@dataclass(frozen=True, slots=True)
class Tray:
    """One simulated GB200 compute tray; ``fabric`` None is a tray without NVLink fabric support."""

    name: str
    fabric: Fabric | None
    gpus: int = GPUS_PER_TRAY
    imex: bool = True
    """Whether the driver install ships ``nvidia-imex``/``nvidia-imex-ctl`` (False: a broken install)."""
    imex_channel_count: int = IMEX_CHANNEL_COUNT
    """The driver's ``NVreg_ImexChannelCount`` (below the install's, channel isolation refuses the node)."""


@dataclass(frozen=True, slots=True)
class NodeHardware:
    """Where ``write_node_hardware`` put a node's files."""

    driver_root: Path
    proc_devices: Path


def gpu_uuid(tray: str, index: int) -> str:
    """A stable GPU UUID per tray and index, so every node's GPUs differ as on real hardware."""
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, f'imexdra-fake-gpu/{tray}/{index}')}"


def nvml_profile(tray: Tray) -> str:
    """The tray as a mock NVML profile (format in docs/nvml-mock.md)."""
    lines = [
        f"# simulated GB200 compute tray {tray.name}",
        f"driver_version={DRIVER_VERSION}",
        f"gpu_count={tray.gpus}",
        f"name={GPU_NAME}",
    ]
    if tray.fabric is None:
        # What a GPU without NVLink fabric answers: the fabric-info call is not supported.
        lines.append("error.nvmlDeviceGetGpuFabricInfo=NOT_SUPPORTED")
    else:
        lines += [
            f"fabric.cluster_uuid={tray.fabric.cluster_uuid}",
            f"fabric.clique_id={tray.fabric.clique}",
            "fabric.state=completed",
        ]
    lines += [f"gpu.{index}.uuid={gpu_uuid(tray.name, index)}" for index in range(tray.gpus)]
    return "\n".join(lines) + "\n"


def make_char_device(path: Path, major: int, minor: int, mode: int = 0o666) -> Path:
    """Make ``path`` a character device ``major:minor`` (``mknod``; needs root, as CI and the demo run).

    No driver backs these numbers, so opening one fails (ENXIO); what a container runtime needs is its
    type and numbers, which CDI reads with ``stat``. An existing node with the same numbers is kept.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        current = path.lstat()
        if stat.S_ISCHR(current.st_mode) and current.st_rdev == os.makedev(major, minor):
            return path
        path.unlink()
    os.mknod(path, stat.S_IFCHR | mode, os.makedev(major, minor))
    path.chmod(mode)  # mknod applies the umask
    return path


def write_driver_root(root: Path, tray: Tray, *, nvml_library: Path) -> Path:
    """Populate ``root`` as the tray's driver install; ``nvml_library`` is the mock to copy in.

    Returns ``root``. Rewriting an existing root replaces the profile (and the library copy).
    """
    for name, (major, minor) in FAKE_DEVICE_NODES.items():
        make_char_device(root / "dev" / name, major, minor)
    write_fabric_mgmt_capability(root / FABRIC_MGMT_CAPABILITY)
    write_driver_params(root / DRIVER_PARAMS, imex_channel_count=tray.imex_channel_count)
    library_dir = root / NVML_LIBRARY_DIR
    library_dir.mkdir(parents=True, exist_ok=True)
    # Copy to a temporary name and rename: a plugin that has the old copy loaded keeps it intact.
    # The versioned file and its soname link, as a driver install lays them out: upstream's CDI
    # discovery looks the library up by the driver's version (docs/upstream-plugin.md).
    versioned = f"libnvidia-ml.so.{DRIVER_VERSION}"
    staged = library_dir / f".{versioned}.tmp"
    shutil.copyfile(nvml_library, staged)
    staged.chmod(0o755)
    staged.replace(library_dir / versioned)
    link = library_dir / NVML_LIBRARY
    if not (link.is_symlink() and link.readlink() == Path(versioned)):
        staged_link = library_dir / f".{NVML_LIBRARY}.link"
        staged_link.unlink(missing_ok=True)
        staged_link.symlink_to(versioned)
        staged_link.replace(link)
    (library_dir / NVML_MOCK_PROFILE).write_text(nvml_profile(tray), encoding="utf-8")
    binaries = root / IMEX_BINARY_DIR
    binaries.mkdir(parents=True, exist_ok=True)
    smi = binaries / NVIDIA_SMI
    shutil.copyfile(Path(nvidia_smi_fake.__file__), smi)
    smi.chmod(0o755)
    if tray.imex:
        install_fake_imex(binaries)
    else:
        for name in IMEX_BINARIES:
            (binaries / name).unlink(missing_ok=True)
    return root


def write_node_hardware(base: Path, tray: Tray, *, nvml_library: Path) -> NodeHardware:
    """Write a node's driver root and its ``/proc/devices`` stand-in under ``base``."""
    hardware = NodeHardware(driver_root=base / "driver-root", proc_devices=base / "proc-devices")
    write_driver_root(hardware.driver_root, tray, nvml_library=nvml_library)
    write_proc_devices(hardware.proc_devices)
    return hardware
