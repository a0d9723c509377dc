"""The plugin process: startup in upstream's order, the long-running services, and a clean shutdown.

Startup (docs/data-path.md §14), any failure is fatal: plugin data dir and CDI root; hardware (NVML,
the IMEX channel major, under channel isolation the driver's channel count, the clique ID, the driver
version in driver-managed mode); the base CDI spec;
the checkpoint, validated against the boot ID; the API client and the ComputeDomain watch;
then the gRPC servers — the registration socket appears last, and from then on the kubelet may call.
Services then run until SIGTERM/SIGINT/SIGHUP/SIGQUIT or until one fails: the watches, ResourceSlice
publishing, stale-claim cleanup, domain-directory cleanup, clique refresh, the optional gRPC health
server and the metrics/probe HTTP server. SIGUSR2 dumps every stack to /tmp/goroutine-stacks.dump.

Shutdown (docs/data-path.md §14): the services stop, and the ``nvidia.com/gpu.clique`` label is
removed when this plugin manages it; the gRPC servers stop (sockets removed, so the kubelet sees the
plugin go); the ResourceSlice is left for the kubelet and the Node owner reference, as upstream does.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from imexdra.api.constants import DRIVER_NAME
from imexdra.api.featuregates import FeatureGates, Gate
from imexdra.api.flags.common import ImexMode, KubeClientSettings, MetricsSettings
from imexdra.api.flags.kubelet_plugin import KubeletPluginSettings
from imexdra.api.imexmode import ImexManagement
from imexdra.common.kube.api import KubeApi
from imexdra.common.kube.connection import connect
from imexdra.common.observability.metrics import Probes, start_http_server
from imexdra.common.process.tasks import supervise
from imexdra.devices.hostimex import CtlHostImex
from imexdra.devices.nvml import Nvml
from imexdra.devices.procfs import HostImexDevices
from imexdra.dra.claims import api_claim_getter
from imexdra.dra.driver import ClaimGetter
from imexdra.dra.health import HealthServer
from imexdra.dra.resourcehealth import ResourceHealthServicer
from imexdra.dra.server import PLUGIN_DATA_DIR_MODE, KubeletPluginServer
from imexdra.dra.slicepublisher import SlicePublisher
from imexdra.kubeletplugin import hardware, metrics, slices
from imexdra.kubeletplugin.cdi import files as cdi_files
from imexdra.kubeletplugin.checkpoint.store import CheckpointStore, read_boot_id
from imexdra.kubeletplugin.cleanup import StaleClaimCleanup, clean_domain_dirs_periodically
from imexdra.kubeletplugin.configs.apply import ConfigApplier
from imexdra.kubeletplugin.daemonowners import DaemonPodOwners
from imexdra.kubeletplugin.devicehealth import device_health_check
from imexdra.kubeletplugin.devicestate import DeviceState
from imexdra.kubeletplugin.domains import CliqueReadiness, ComputeDomainCache
from imexdra.kubeletplugin.driver import ImexDriver
from imexdra.kubeletplugin.hardware import CliqueTracker, HardwareSettings
from imexdra.kubeletplugin.nodelabels import NodeLabeler
from imexdra.kubeletplugin.paths import PluginPaths

_log = structlog.get_logger(__name__)

FIELD_MANAGER = "compute-domain-kubelet-plugin"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
LABEL_REMOVAL_TIMEOUT = 5.0
#: Where SIGUSR2 writes the stacks (upstream's path; its bats suite checks it).
STACK_DUMP = Path("/tmp/goroutine-stacks.dump")


@dataclass(frozen=True, slots=True)
class PluginConfig:
    """Everything the process was configured with."""

    node_name: str
    namespace: str
    kubelet: KubeletPluginSettings
    gates: FeatureGates
    #: Who runs nvidia-imex (``imexdra.api.imexmode``): every mode-dependent step asks it.
    imex: ImexManagement
    kube_client: KubeClientSettings
    metrics: MetricsSettings
    hardware: HardwareSettings
    #: ``--imex-isolation=channel`` (host-managed only; docs/channel-isolation.md).
    channel_isolation: bool = False
    boot_id_path: Path | None = None

    @property
    def paths(self) -> PluginPaths:
        """The kubelet-facing directories and sockets."""
        return PluginPaths(
            plugins_dir=self.kubelet.kubelet_plugins_directory_path,
            registrar_dir=self.kubelet.kubelet_registrar_directory_path,
        )


async def run(config: PluginConfig, stop: asyncio.Event | None = None) -> None:
    """Start the plugin, serve until stopped, shut down; raises when startup or a service fails."""
    stop = stop or _stop_on_signals()
    paths = config.paths
    paths.plugin_data_dir.mkdir(mode=PLUGIN_DATA_DIR_MODE, parents=True, exist_ok=True)
    cdi_files.ensure_cdi_root(config.kubelet.cdi_root)
    nvml = hardware.open_nvml(config.hardware)
    devices = hardware.open_imex_devices(config.hardware)
    if config.channel_isolation:
        hardware.check_channel_pool(config.hardware)
    if config.imex.checks_driver_version(config.gates):
        await asyncio.to_thread(hardware.check_driver_version, nvml)
    # One client for everything (watches, slices, Events, the claim reads and node label writes of every
    # prepare): one transport, credentials and QPS bucket (docs/kube-client.md).
    connection = connect(
        config.kube_client.kubeconfig,
        qps=config.kube_client.kube_api_qps,
        burst=config.kube_client.kube_api_burst,
    )
    client = connection.kube(field_manager=FIELD_MANAGER)
    try:
        await _serve(config, client, nvml, devices, stop)
    finally:
        client.close()


@dataclass(slots=True)
class _Parts:
    """The plugin's long-lived objects, wired together."""

    domains: ComputeDomainCache
    readiness: CliqueReadiness
    labeler: NodeLabeler
    cliques: CliqueTracker
    store: CheckpointStore
    state: DeviceState
    publisher: SlicePublisher
    get_claim: ClaimGetter
    #: The devices the node publishes, by name (the resource-health stream's list).
    device_names: list[str]


async def _assemble(config: PluginConfig, client: KubeApi, nvml: Nvml, devices: HostImexDevices) -> _Parts:
    """Startup steps 5-8 (docs/data-path.md §14): clique ID, base CDI spec, checkpoint, prepare machinery."""
    labeler = NodeLabeler(client, config.node_name, watch=client if config.imex.labels_nodes else None)
    cliques = CliqueTracker(
        nvml,
        config.gates,
        on_change=_gpu_clique_labeller(config, labeler),
        registration_timeout=config.kubelet.fabric_registration_timeout.total_seconds(),
    )
    await cliques.discover()
    base = hardware.build_base_spec(config.hardware, runs_imex_daemons=config.imex.runs_imex_daemons)
    await cdi_files.write_base_spec(config.kubelet.cdi_root, base)
    store = CheckpointStore(config.paths.plugin_data_dir)
    boot_id = read_boot_id(config.boot_id_path) if config.boot_id_path else read_boot_id()
    metrics.sync_prepared_devices(config.node_name, await store.initialize(boot_id))
    domains = ComputeDomainCache(client, config.node_name)
    get_claim = api_claim_getter(client)
    readiness = CliqueReadiness(
        client,
        domains,
        node_name=config.node_name,
        namespace=config.namespace,
        clique_id=cliques.current,
        changes=domains.changes,
        cliques_enabled=config.imex.cliques_enabled(config.gates),
    )
    applier = ConfigApplier(
        imex=config.imex,
        devices=devices,
        paths=config.paths,
        clique_id=lambda: cliques.current,
        domains=domains,
        labels=labeler,
        readiness=readiness,
        daemon_owners=DaemonPodOwners(client, config.namespace),
        host_imex=CtlHostImex(
            driver_root=config.kubelet.container_driver_root, socket=config.kubelet.imex_host_socket_path
        ),
        channel_isolation=config.channel_isolation,
    )
    state = DeviceState(
        store=store,
        applier=applier,
        allocatable=slices.allocatable_devices(devices.channel_count),
        cdi_root=config.kubelet.cdi_root,
        roots=config.hardware.roots,
        get_claim=get_claim,
        on_change=lambda cp: metrics.sync_prepared_devices(config.node_name, cp),
    )
    published = slices.slice_devices(
        imex=config.imex,
        channel_isolation=config.channel_isolation,
        channel_count=devices.channel_count,
        binding_conditions=config.gates.enabled(Gate.COMPUTE_DOMAIN_BINDING_CONDITIONS),
    )
    publisher = SlicePublisher(
        client,
        driver_name=DRIVER_NAME,
        node_name=config.node_name,
        devices=published,
        node_uid=labeler.node_uid,
    )
    names = [device["name"] for device in published]
    return _Parts(domains, readiness, labeler, cliques, store, state, publisher, get_claim, names)


def _services(config: PluginConfig, parts: _Parts) -> dict[str, Coroutine[Any, Any, None]]:
    paths = config.paths
    cleanup = StaleClaimCleanup(
        store=parts.store, state=parts.state, get_claim=parts.get_claim, lock_path=paths.prepare_lock
    )
    services: dict[str, Coroutine[Any, Any, None]] = {
        "computedomain-watch": parts.domains.run(),
        "resourceslice-publisher": parts.publisher.run(),
        "stale-claim-cleanup": cleanup.run(),
        "domain-dir-cleanup": clean_domain_dirs_periodically(paths.domains_dir, parts.domains.uids),
        "clique-refresh": parts.cliques.run(),
    }
    if parts.readiness.informer is not None:
        services["clique-watch"] = parts.readiness.informer.run()
    if parts.labeler.informer is not None:
        services["node-watch"] = parts.labeler.informer.run()
    if config.kubelet.gpu_clique_label_enabled:
        services["gpu-clique-label"] = _manage_gpu_clique_label(parts.labeler, parts.cliques, parts.domains)
    return services


async def _serve(
    config: PluginConfig, client: KubeApi, nvml: Nvml, devices: HostImexDevices, stop: asyncio.Event
) -> None:
    parts = await _assemble(config, client, nvml, devices)
    driver = ImexDriver(parts.state, config.paths.prepare_lock, wake=parts.domains.changes)
    check = device_health_check(devices, parts.device_names)
    health = ResourceHealthServicer(pool=config.node_name, check=check)
    server = KubeletPluginServer(driver=driver, get_claim=parts.get_claim, paths=config.paths, health=health)
    async with contextlib.AsyncExitStack() as stack:
        await server.start()
        stack.push_async_callback(server.stop)
        await _start_endpoints(config, stack, parts.domains)
        _log.info(
            "Kubelet plugin started",
            node=config.node_name,
            host_managed=config.imex.mode is ImexMode.HOST_MANAGED,
        )
        await supervise(_services(config, parts), stop=stop, grace=10.0)
    _log.info("shutdown")


async def _start_endpoints(
    config: PluginConfig, stack: contextlib.AsyncExitStack, domains: ComputeDomainCache
) -> None:
    if config.kubelet.healthcheck_port >= 0:
        health = HealthServer(config.paths, config.kubelet.healthcheck_port, os.environ.get("POD_IP"))
        await health.start()
        stack.push_async_callback(health.stop)
    address = config.metrics.listen_address
    if address is not None:
        probes = Probes()
        probes.add_liveness("kubelet-plugin-sockets", lambda: config.paths.registration_socket.exists())
        probes.add_readiness("computedomain-cache", domains.informer.has_synced)
        http = await start_http_server(
            address[0] or "0.0.0.0",  # noqa: S104 - upstream listens on all interfaces too
            address[1],
            probes=probes,
            metrics_path=config.metrics.metrics_path,
        )
        stack.callback(http.close)


def _gpu_clique_labeller(
    config: PluginConfig, labeler: NodeLabeler
) -> Callable[[str], Awaitable[None]] | None:
    if not config.kubelet.gpu_clique_label_enabled:
        return None

    async def relabel(clique_id: str) -> None:
        await labeler.set_gpu_clique(clique_id)

    return relabel


async def _manage_gpu_clique_label(
    labeler: NodeLabeler, cliques: CliqueTracker, domains: ComputeDomainCache
) -> None:
    """Set ``nvidia.com/gpu.clique`` once the caches are up; remove it again on shutdown."""
    await domains.informer.wait_for_sync()
    if cliques.current:
        await labeler.set_gpu_clique(cliques.current)
    try:
        await asyncio.Event().wait()
    finally:
        with contextlib.suppress(Exception):
            async with asyncio.timeout(LABEL_REMOVAL_TIMEOUT):
                await labeler.set_gpu_clique(None)


def _stop_on_signals() -> asyncio.Event:
    event = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, _stopping, event, signum)
    loop.add_signal_handler(signal.SIGUSR2, dump_stacks)
    return event


def _stopping(event: asyncio.Event, signum: signal.Signals) -> None:
    _log.info("Stop requested", signal=signum.name)
    event.set()


def dump_stacks(path: Path = STACK_DUMP) -> None:
    """SIGUSR2: every thread's and every asyncio task's stack into ``path`` (upstream's goroutine dump)."""
    try:
        with path.open("w", encoding="utf-8") as out:
            path.chmod(0o666)
            faulthandler.dump_traceback(file=out, all_threads=True)
            for task in asyncio.all_tasks():
                out.write(f"\nasyncio task {task.get_name()}:\n")
                task.print_stack(file=out)
    except OSError as error:
        _log.warning("Stack dump to file failed; writing to stderr", path=str(path), error=str(error))
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        return
    _log.info("Stacks dumped", path=str(path))
