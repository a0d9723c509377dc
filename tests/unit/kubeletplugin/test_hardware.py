"""NVML selection, mock mode, driver-version gate, clique tracking, base CDI spec (devices, IMEX programs)."""

import asyncio
import dataclasses
import json
from pathlib import Path

import pytest
import structlog.testing

from imexdra.api.featuregates import resolve_feature_gates
from imexdra.common.errors import PermanentError
from imexdra.devices.nvml import FabricError, FabricNotReadyError
from imexdra.devices.nvml_real import PynvmlNvml
from imexdra.devices.procfs import DeviceDiscoveryError
from imexdra.kubeletplugin.cdi.spec import Mount
from imexdra.kubeletplugin.hardware import (
    CliqueTracker,
    HardwareSettings,
    build_base_spec,
    check_channel_pool,
    check_driver_version,
    open_imex_devices,
    open_nvml,
)
from imexdra_sim.devices.driverroot_fake import make_char_device
from imexdra_sim.devices.nvml_fake import FakeNvml
from imexdra_sim.devices.procfs_fake import (
    write_driver_params,
    write_fabric_mgmt_capability,
    write_proc_devices,
)
from tests.support.waiting import eventually

UUID = "7c9a3e1f-0d2b-4c5e-8f6a-1b2c3d4e5f60"


def nvml_file(path: Path, *, clique: int | None = 5, version: str = "570.170.01") -> Path:
    fabric = {"clusterUUID": UUID, "cliqueID": clique} if clique is not None else None
    path.write_text(json.dumps({"driverVersion": version, "fabric": fabric}))
    return path


def simulated(tmp_path: Path) -> HardwareSettings:
    root = tmp_path / "driver-root"
    write_fabric_mgmt_capability(root / "proc/driver/nvidia/capabilities/fabric-imex-mgmt", minor=7)
    return HardwareSettings(
        container_driver_root=root,
        host_driver_root=Path("/"),
        alt_proc_devices=write_proc_devices(tmp_path / "proc-devices", imex_channels_major=240),
    )


def test_mock_mode_reads_procfs_stand_ins(tmp_path: Path) -> None:
    """ALT_PROC_DEVICES_PATH replaces /proc/devices; the capability is read under the driver root."""
    devices = open_imex_devices(simulated(tmp_path))
    assert devices.channel(3).major == 240
    assert devices.channel(3).path == "/dev/nvidia-caps-imex-channels/channel3"
    assert devices.fabric_mgmt().path == "/dev/nvidia-caps/nvidia-cap7"


def test_missing_channel_major_is_fatal(tmp_path: Path) -> None:
    """Without nvidia-caps-imex-channels in /proc/devices the plugin cannot start."""
    settings = simulated(tmp_path)
    write_proc_devices(tmp_path / "proc-devices", imex_channels_major=None)
    with pytest.raises(DeviceDiscoveryError, match="nvidia-caps-imex-channels"):
        open_imex_devices(settings)


@pytest.mark.parametrize(
    ("driver", "ok"), [(2048, True), (4096, True), (16, False)], ids=["same", "more", "fewer"]
)
def test_channel_pool_check(tmp_path: Path, driver: int, ok: bool) -> None:
    """Channel isolation starts only when the driver has at least the install's channels (mock mode reads
    the params file under the driver root); fewer is fatal, naming both numbers and the chart value."""
    settings = simulated(tmp_path)
    write_driver_params(
        settings.container_driver_root / "proc/driver/nvidia/params", imex_channel_count=driver
    )
    if ok:
        assert check_channel_pool(settings) == driver
        return
    with pytest.raises(PermanentError) as caught:
        check_channel_pool(settings)
    assert "the driver has 16 IMEX channels" in str(caught.value)
    assert "hands out 2048" in str(caught.value)
    assert "resources.computeDomains.imex.channelCount" in str(caught.value)


def test_channel_pool_check_without_the_parameter(tmp_path: Path) -> None:
    """A driver whose params lack ImexChannelCount: fatal, saying which module parameter to set."""
    settings = dataclasses.replace(simulated(tmp_path), channel_count=64)
    write_driver_params(settings.container_driver_root / "proc/driver/nvidia/params", imex_channel_count=None)
    with pytest.raises(PermanentError, match="NVreg_ImexChannelCount=64 or use --imex-isolation=domain"):
        check_channel_pool(settings)


def test_channel_count_reaches_the_devices(tmp_path: Path) -> None:
    """The install's channel count bounds the channel device nodes the plugin can build."""
    devices = open_imex_devices(dataclasses.replace(simulated(tmp_path), channel_count=4))
    assert devices.channel_count == 4
    assert devices.channel(3).minor == 3
    with pytest.raises(DeviceDiscoveryError, match="out of range"):
        devices.channel(4)


@pytest.mark.parametrize("mock_mode", [True, False], ids=["mock-mode", "real-node"])
def test_nvml_is_the_library_under_the_driver_root(tmp_path: Path, mock_mode: bool) -> None:
    """NVML is always nvidia-ml-py over libnvidia-ml.so.1 under the driver root, mock mode or not."""
    settings = simulated(tmp_path)
    if not mock_mode:
        settings = HardwareSettings(
            container_driver_root=settings.container_driver_root, host_driver_root=Path("/")
        )
    with pytest.raises(DeviceDiscoveryError, match=r"libnvidia-ml\.so\.1 not found"):
        open_nvml(settings)
    library = settings.container_driver_root / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"
    library.parent.mkdir(parents=True)
    library.touch()
    nvml = open_nvml(settings)
    assert isinstance(nvml, PynvmlNvml)
    assert nvml.library_path == library


@pytest.mark.parametrize(
    ("version", "ok"), [("570.158.01", True), ("575.51.03", True), ("570.124.06", False)]
)
def test_driver_version_gate(tmp_path: Path, version: str, ok: bool) -> None:
    """IMEX daemons with DNS names need driver >= 570.158.01."""
    nvml = FakeNvml(nvml_file(tmp_path / "nvml.json", version=version))
    if ok:
        assert check_driver_version(nvml) == version
    else:
        with pytest.raises(PermanentError, match="minimum version not satisfied"):
            check_driver_version(nvml)


async def test_clique_refresh_never_clears(tmp_path: Path) -> None:
    """Discovery sets the clique; a refresh adopts a new one and ignores a transition to none."""
    path = nvml_file(tmp_path / "nvml.json", clique=5)
    tracker = CliqueTracker(FakeNvml(path), resolve_feature_gates(""))
    assert await tracker.discover() == f"{UUID}.5"
    nvml_file(path, clique=None)
    await tracker.refresh()
    assert tracker.current == f"{UUID}.5"
    nvml_file(path, clique=6)
    await tracker.refresh()
    assert tracker.current == f"{UUID}.6"
    path.write_text("initError: DRIVER_NOT_LOADED\n")
    await tracker.refresh()  # logged, not raised
    assert tracker.current == f"{UUID}.6"


async def test_clique_change_reaches_the_label_hook(tmp_path: Path) -> None:
    """With the gpu.clique label enabled, every refresh re-applies the current clique."""
    seen: list[str] = []

    async def relabel(clique: str) -> None:
        seen.append(clique)

    tracker = CliqueTracker(
        FakeNvml(nvml_file(tmp_path / "n.json")), resolve_feature_gates(""), on_change=relabel
    )
    await tracker.discover()
    await tracker.refresh()
    assert seen == [f"{UUID}.5"]


def fabric_file(path: Path, state: str, *, status: int = 0) -> Path:
    """The fake NVML's node file with every GPU's registration in ``state``, replaced atomically (the
    tracker may be reading it from its worker thread at that moment)."""
    staged = path.with_suffix(".tmp")
    fabric = {"clusterUUID": UUID, "cliqueID": 5, "state": state, "status": status}
    staged.write_text(json.dumps({"fabric": fabric}))
    staged.replace(path)
    return path


WAITING = "Waiting for NVLink fabric registration to complete"


async def test_discovery_waits_for_a_registration_in_progress(tmp_path: Path) -> None:
    """A GPU still IN_PROGRESS at startup (upstream #1264's reboot race) is polled until it completes."""
    path = fabric_file(tmp_path / "nvml.json", "inProgress")
    tracker = CliqueTracker(
        FakeNvml(path), resolve_feature_gates(""), registration_timeout=60.0, poll_interval=0.05
    )
    with structlog.testing.capture_logs() as logs:
        discovery = asyncio.create_task(tracker.discover())
        await eventually("the wait logged", lambda: any(e["event"] == WAITING for e in logs), within=10.0)
        assert not discovery.done()
        fabric_file(path, "completed")
        assert await asyncio.wait_for(discovery, timeout=10.0) == f"{UUID}.5"
    [waiting] = [e for e in logs if e["event"] == WAITING]
    assert "state=2, refusing to start" in waiting["error"]
    assert tracker.current == f"{UUID}.5"


@pytest.mark.parametrize(
    ("bound", "state", "message"),
    [
        (
            0.3,
            "inProgress",
            r"state=2, refusing to start \(still so after waiting 0.3s .*fabric-registration",
        ),
        (0.3, "notStarted", r"state=1, refusing to start \(still so after waiting 0.3s"),
        (0.0, "inProgress", r"state=2, refusing to start$"),
    ],
    ids=["in-progress-past-the-bound", "not-started-past-the-bound", "no-wait-as-upstream"],
)
async def test_discovery_fails_clearly_once_the_bound_has_passed(
    tmp_path: Path, bound: float, state: str, message: str
) -> None:
    """A registration that stays incomplete fails startup after the bound, saying how long it waited."""
    path = fabric_file(tmp_path / "nvml.json", state)
    tracker = CliqueTracker(
        FakeNvml(path), resolve_feature_gates(""), registration_timeout=bound, poll_interval=0.05
    )
    with pytest.raises(FabricNotReadyError, match=message):
        await asyncio.wait_for(tracker.discover(), timeout=10.0)
    assert tracker.current == ""


async def test_discovery_does_not_wait_out_a_registration_error(tmp_path: Path) -> None:
    """A completed registration with an error status is no reboot race: it fails at once, bound or not."""
    path = fabric_file(tmp_path / "nvml.json", "completed", status=27)
    tracker = CliqueTracker(FakeNvml(path), resolve_feature_gates(""), registration_timeout=600.0)
    with structlog.testing.capture_logs() as logs, pytest.raises(FabricError, match="status=27"):
        await asyncio.wait_for(tracker.discover(), timeout=10.0)
    assert not [e for e in logs if e["event"] == WAITING]


def test_base_spec_of_a_simulated_node(tmp_path: Path) -> None:
    """The spec lists the dev root's NVIDIA char devices (not the excluded nvswitch) with hostPaths."""
    settings = simulated(tmp_path)
    devices = ("nvidia0", "nvidiactl", "nvidia-caps-imex-channels/channel0", "nvidia-nvswitch0")
    for minor, dev in enumerate(devices):
        make_char_device(settings.container_driver_root / "dev" / dev, 195, minor)
    spec = build_base_spec(settings)
    [device] = spec.devices
    assert device.name == "all"
    paths = [node.path for node in device.container_edits.device_nodes]
    assert paths == ["/dev/nvidia0", "/dev/nvidiactl", "/dev/nvidia-caps-imex-channels/channel0"]
    assert "NVIDIA_VISIBLE_DEVICES=void" in spec.container_edits.env


def with_devices(settings: HardwareSettings) -> HardwareSettings:
    for minor, dev in enumerate(("nvidia0", "nvidiactl")):
        make_char_device(settings.container_driver_root / "dev" / dev, 195, minor)
    return settings


def test_base_spec_mounts_the_drivers_imex_programs(tmp_path: Path) -> None:
    """nvidia-imex and nvidia-imex-ctl from the driver root: read-only at /usr/bin, host paths on the host."""
    settings = dataclasses.replace(
        with_devices(simulated(tmp_path)), host_driver_root=Path("/run/nvidia/driver")
    )
    for name in ("nvidia-imex", "nvidia-imex-ctl"):
        program = settings.container_driver_root / "usr/bin" / name
        program.parent.mkdir(parents=True, exist_ok=True)
        program.write_text("#!/bin/sh\n")
        program.chmod(0o755)
    spec = build_base_spec(settings)
    options = ("ro", "nosuid", "nodev", "bind")
    assert spec.container_edits.mounts == (
        Mount("/run/nvidia/driver/usr/bin/nvidia-imex", "/usr/bin/nvidia-imex", options),
        Mount("/run/nvidia/driver/usr/bin/nvidia-imex-ctl", "/usr/bin/nvidia-imex-ctl", options),
    )
    [device] = spec.devices
    assert device.container_edits.mounts == ()


@pytest.mark.parametrize("runs_imex_daemons", [True, False], ids=["driver-managed", "host-managed"])
def test_base_spec_without_the_programs(tmp_path: Path, runs_imex_daemons: bool) -> None:
    """A driver root without them: no mounts; driver-managed nodes warn that daemons cannot start."""
    settings = with_devices(simulated(tmp_path))
    with structlog.testing.capture_logs() as logs:
        spec = build_base_spec(settings, runs_imex_daemons=runs_imex_daemons)
    assert spec.container_edits.mounts == ()
    warned = [entry for entry in logs if entry["log_level"] == "warning"]
    if runs_imex_daemons:
        [warning] = warned
        assert "IMEX daemons on this node cannot start" in warning["event"]
        assert warning["missing"] == ["nvidia-imex", "nvidia-imex-ctl"]
    else:
        assert warned == []
