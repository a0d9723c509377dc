"""The node's hardware as the plugin sees it: NVML, IMEX device nodes, the clique ID, the base CDI spec.

Backends are chosen once, at startup (docs/data-path.md §14, docs/hardware.md):

- NVML: the library under the container driver root (``libnvidia-ml.so.1``), through nvidia-ml-py —
  on a simulated node the mock library in its driver root (docs/driver-root.md);
- IMEX device nodes: ``/proc/devices`` and ``/proc/driver/nvidia/capabilities/fabric-imex-mgmt``; with
  ``ALT_PROC_DEVICES_PATH`` set (upstream's mock mode) that file replaces ``/proc/devices`` and the
  capability is read under the container driver root instead;
- ``/dev``: under the container driver root when it has one (the dev root); character devices only;
- under channel isolation, the driver's ``ImexChannelCount`` (``/proc/driver/nvidia/params``, in mock
  mode under the container driver root) must be at least the install's channel count
  (``check_channel_pool``, docs/channel-isolation.md §3).

``CliqueTracker`` owns the node's clique ID: discovered at startup (errors are fatal), refreshed every
10 minutes, never cleared by a refresh that finds none (docs/hardware.md §6.2). At startup a GPU whose
fabric registration has not completed yet (``FabricNotReadyError``, under ``CrashOnNVLinkFabricErrors``)
is waited for, up to ``--fabric-registration-timeout``, polling NVML: after a reboot the plugin can
start before the fabric manager has registered the GPUs (upstream #1264). Once the bound has passed
the error is fatal, saying how long it waited.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from imexdra.api.featuregates import FeatureGates, Gate
from imexdra.common.errors import PermanentError
from imexdra.devices.devnodes import nvidia_device_nodes
from imexdra.devices.driverroot import IMEX_BINARIES, dev_root, driver_binaries, find_nvml_library
from imexdra.devices.nvml import FabricNotReadyError, Nvml, clique_id, driver_version_at_least
from imexdra.devices.nvml_real import PynvmlNvml
from imexdra.devices.procfs import (
    DRIVER_PARAMS,
    FABRIC_IMEX_MGMT_CAPABILITY,
    IMEX_CHANNEL_COUNT,
    IMEX_CHANNEL_COUNT_PARAM,
    PROC_DEVICES,
    DeviceDiscoveryError,
    HostImexDevices,
    read_imex_channel_count,
)
from imexdra.kubeletplugin.cdi.spec import ContainerEdits, DriverRoots, Spec, base_spec, driver_binary_mounts

_log = structlog.get_logger(__name__)

#: Upstream's minimum driver for IMEX daemons addressed by DNS names (gate IMEXDaemonsWithDNSNames).
MIN_DRIVER_VERSION_DNS_NAMES = "570.158.01"
CLIQUE_REFRESH_PERIOD = 600.0
#: How often startup asks NVML again while a GPU's fabric registration is incomplete: registration
#: takes seconds after a reboot (upstream #1264 saw about 3 s), so a few seconds lose little.
FABRIC_POLL_INTERVAL = 2.0
#: How often that wait is logged (it is logged when it starts and whenever the answer changes too).
FABRIC_WAIT_LOG_INTERVAL = 30.0


@dataclass(frozen=True, slots=True)
class HardwareSettings:
    """Where the node's hardware facts come from."""

    container_driver_root: Path
    host_driver_root: Path
    #: ``ALT_PROC_DEVICES_PATH``: upstream's mock mode.
    alt_proc_devices: Path | None = None
    #: ``--imex-channel-count``: the channels every node's driver has (docs/channel-isolation.md §3).
    channel_count: int = IMEX_CHANNEL_COUNT

    def proc_file(self, path: Path) -> Path:
        """Where to read the driver's procfs file ``path``: under the container driver root in mock mode."""
        if self.alt_proc_devices is not None:
            return self.container_driver_root / path.relative_to("/")
        return path

    @property
    def roots(self) -> DriverRoots:
        """The driver root inside this container and on the host (the CDI root transform)."""
        return DriverRoots(container=str(self.container_driver_root), host=str(self.host_driver_root))


def open_nvml(settings: HardwareSettings) -> Nvml:
    """The NVML backend: ``libnvidia-ml.so.1`` under the container driver root, through nvidia-ml-py."""
    library = find_nvml_library(settings.container_driver_root)
    _log.info("Using NVML library", path=str(library))
    return PynvmlNvml(library_path=library)


def open_imex_devices(settings: HardwareSettings) -> HostImexDevices:
    """IMEX channel and fabric-management device nodes; fails when the channel major is missing."""
    return HostImexDevices(
        proc_devices=settings.alt_proc_devices or PROC_DEVICES,
        fabric_mgmt_capability=settings.proc_file(FABRIC_IMEX_MGMT_CAPABILITY),
        channel_count=settings.channel_count,
    )


def check_channel_pool(settings: HardwareSettings) -> int:
    """Require the driver to have at least the install's channels (startup, channel isolation).

    The controller hands out channels ``1 .. channel_count - 1`` on the word of the install's setting;
    a node with fewer would be given numbers it cannot open. Returns the driver's count.

    Raises:
        PermanentError: the driver has fewer channels, or its count cannot be read.

    """
    params = settings.proc_file(DRIVER_PARAMS)
    try:
        found = read_imex_channel_count(params)
    except DeviceDiscoveryError as error:
        raise PermanentError(
            f"channel isolation needs the driver's IMEX channel count: {error}; set the nvidia module "
            f"parameter NVreg_ImexChannelCount={settings.channel_count} or use --imex-isolation=domain"
        ) from error
    if found < settings.channel_count:
        raise PermanentError(
            f"the driver has {found} IMEX channels ({IMEX_CHANNEL_COUNT_PARAM} in {params}) but this install "
            f"hands out {settings.channel_count} (--imex-channel-count, chart "
            "resources.computeDomains.imex.channelCount): set the same count on every node and in the chart"
        )
    _log.info("IMEX channel pool checked", driver_channels=found, install_channels=settings.channel_count)
    return found


def check_driver_version(nvml: Nvml) -> str:
    """Require the driver version IMEX daemons with DNS names need (startup, driver-managed mode).

    Raises:
        PermanentError: the driver is older than 570.158.01.

    """
    _log.info("Starting driver version validation for IMEXDaemonsWithDNSNames feature...")
    version = nvml.driver_version()
    if not driver_version_at_least(version, MIN_DRIVER_VERSION_DNS_NAMES):
        raise PermanentError(
            f"minimum version not satisfied for IMEXDaemonsWithDNSNames feature: driver {version} "
            f"< {MIN_DRIVER_VERSION_DNS_NAMES}"
        )
    _log.info(f"Driver version validation passed: {version} >= {MIN_DRIVER_VERSION_DNS_NAMES}")
    return version


def build_base_spec(settings: HardwareSettings, *, runs_imex_daemons: bool = True) -> Spec:
    """The base CDI spec: every NVIDIA device node, and the driver's IMEX programs at ``/usr/bin``.

    Device ``all`` lists the device nodes under the dev root; at spec level, ``nvidia-imex`` and
    ``nvidia-imex-ctl`` from the driver root are bind-mounted read-only for every container using the
    spec (the compute-domain daemons). A driver root without them gives a spec without those mounts;
    with ``runs_imex_daemons`` (driver-managed mode) that is logged as a warning, and a daemon on this
    node fails saying what is missing (docs/driver-root.md).
    """
    nodes = nvidia_device_nodes(dev_root(settings.container_driver_root))
    binaries = driver_binaries(settings.container_driver_root)
    missing = [name for name in IMEX_BINARIES if name not in binaries]
    if missing and runs_imex_daemons:
        _log.warning(
            "Driver programs not found in the driver root; IMEX daemons on this node cannot start",
            missing=missing,
            driver_root=str(settings.container_driver_root),
        )
    spec_level = ContainerEdits(mounts=driver_binary_mounts(binaries))
    return base_spec(nodes, roots=settings.roots, spec_edits=spec_level)


class CliqueTracker:
    """The node's clique ID (``<clusterUUID>.<cliqueId>``, or ``""`` without an NVLink fabric)."""

    def __init__(
        self,
        nvml: Nvml,
        gates: FeatureGates,
        *,
        on_change: Callable[[str], Awaitable[None]] | None = None,
        registration_timeout: float = 0.0,
        poll_interval: float = FABRIC_POLL_INTERVAL,
    ) -> None:
        """``registration_timeout``: seconds ``discover`` waits for incomplete registrations (0: none)."""
        self._nvml = nvml
        self._strict = gates.enabled(Gate.CRASH_ON_NVLINK_FABRIC_ERRORS)
        self._on_change = on_change
        self._registration_timeout = registration_timeout
        self._poll_interval = poll_interval
        self.current = ""

    async def discover(self) -> str:
        """Initial discovery; waits out an incomplete fabric registration within the bound.

        Raises:
            FabricNotReadyError: a GPU's registration is still incomplete once the bound has passed.
            DriverError: any other NVML or fabric error, at once.

        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._registration_timeout
        logged, logged_at = "", -float("inf")
        while True:
            try:
                self.current = await asyncio.to_thread(self._read)
                break
            except FabricNotReadyError as error:
                now = loop.time()
                if now >= deadline:
                    raise self._gave_up(error) from error
                if str(error) != logged or now - logged_at >= FABRIC_WAIT_LOG_INTERVAL:
                    _log.warning(
                        "Waiting for NVLink fabric registration to complete",
                        error=str(error),
                        remaining_seconds=round(deadline - now),
                    )
                    logged, logged_at = str(error), now
                await asyncio.sleep(min(self._poll_interval, deadline - now))
        if logged:
            _log.info("NVLink fabric registration completed")
        _log.info("Clique ID discovered", clique_id=self.current or "(none: no NVLink fabric)")
        return self.current

    def _read(self) -> str:
        return clique_id(self._nvml.gpus(), strict=self._strict)

    def _gave_up(self, error: FabricNotReadyError) -> FabricNotReadyError:
        if not self._registration_timeout:
            return error
        return FabricNotReadyError(
            f"{error} (still so after waiting {self._registration_timeout:g}s for the registration to "
            "complete, --fabric-registration-timeout; is the node's NVIDIA fabric manager running?)"
        )

    async def refresh(self) -> None:
        """Re-read the clique ID; a new non-empty value replaces the old, errors are only logged."""
        try:
            found = await asyncio.to_thread(self._read)
        except Exception as error:
            _log.warning("Clique ID refresh failed", error=str(error))
            return
        if found and found != self.current:
            _log.info("Clique ID changed", old=self.current, new=found)
            self.current = found
        if self._on_change is not None and self.current:
            await self._on_change(self.current)

    async def run(self, period: float = CLIQUE_REFRESH_PERIOD) -> None:
        """Refresh every ``period`` until cancelled."""
        while True:
            await asyncio.sleep(period)
            await self.refresh()
