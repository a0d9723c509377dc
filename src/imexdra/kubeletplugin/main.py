"""Entry point of ``compute-domain-kubelet-plugin``: upstream's flags and variables, then ``plugin.run``.

Flags and environment variables are upstream's (docs/compatibility.md §2.8, through the option groups
of ``imexdra.api.flags``), including upstream's mock mode, ``--alt-proc-devices-path`` /
``ALT_PROC_DEVICES_PATH``: this file replaces ``/proc/devices`` and the fabric-imex-mgmt capability is
read under the container driver root (device nodes are character devices in every mode).
NVML is always the ``libnvidia-ml.so.1`` under the container driver root (on a simulated node, the
mock library its driver root holds: docs/driver-root.md).

The process logs its settings and the resolved feature gates first; it exits 0 after a
signal-initiated shutdown and 1 when startup or a service fails.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import click
import structlog

from imexdra.api.featuregates import FeatureGates, log_feature_gates
from imexdra.api.flags.common import (
    ImexIsolation,
    ImexSettings,
    KubeClientSettings,
    LoggingSettings,
    MetricsSettings,
    feature_gate_options,
    imex_options,
    kube_client_options,
    logging_options,
    metrics_options,
    namespace_options,
    node_name_options,
)
from imexdra.api.flags.kubelet_plugin import KubeletPluginSettings, kubelet_plugin_options
from imexdra.api.imexmode import choose_imex_mode
from imexdra.common.errors import ConfigError, DriverError
from imexdra.common.process.termination import write_termination_message
from imexdra.kubeletplugin.hardware import HardwareSettings
from imexdra.kubeletplugin.plugin import PluginConfig, run

_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)


@click.command(name="compute-domain-kubelet-plugin", context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="imexdra")  # no -v alias: -v is klog's verbosity, as upstream's
@logging_options
@feature_gate_options
@kube_client_options
@metrics_options
@namespace_options
@node_name_options
@imex_options
@kubelet_plugin_options
@click.option(
    "--alt-proc-devices-path",
    envvar="ALT_PROC_DEVICES_PATH",
    show_envvar=True,
    type=_FILE,
    default=None,
    help="Simulated node: file to read instead of /proc/devices (upstream's mock mode).",
)
def main(
    logging: LoggingSettings,
    feature_gates: FeatureGates,
    kube_client: KubeClientSettings,
    metrics: MetricsSettings,
    namespace: str,
    node_name: str,
    imex: ImexSettings,
    kubelet_plugin: KubeletPluginSettings,
    alt_proc_devices_path: Path | None,
) -> None:
    """The per-node DRA kubelet plugin for IMEX channels (driver compute-domain.nvidia.com)."""
    logging.configure()
    log = structlog.get_logger("imexdra.kubeletplugin")
    try:
        imex_mode = choose_imex_mode(imex, feature_gates)
        isolation = imex_mode.admit_isolation(imex.imex_isolation)
    except ConfigError as error:
        raise click.UsageError(str(error)) from error
    log_feature_gates(feature_gates)
    config = PluginConfig(
        node_name=node_name,
        namespace=namespace,
        kubelet=kubelet_plugin,
        gates=feature_gates,
        imex=imex_mode,
        kube_client=kube_client,
        metrics=metrics,
        hardware=HardwareSettings(
            container_driver_root=kubelet_plugin.container_driver_root,
            host_driver_root=kubelet_plugin.nvidia_driver_root,
            alt_proc_devices=alt_proc_devices_path,
            channel_count=imex.imex_channel_count,
        ),
        channel_isolation=isolation is ImexIsolation.CHANNEL,
    )
    log.info(
        "Flags",
        nodeName=node_name,
        namespace=namespace,
        klogVerbosity=logging.verbosity,
        imexMode=imex_mode.mode.value,
        imexIsolation=isolation.value,
        imexChannelCount=imex.imex_channel_count,
        kubeletPluginsDirectoryPath=str(kubelet_plugin.kubelet_plugins_directory_path),
        kubeletRegistrarDirectoryPath=str(kubelet_plugin.kubelet_registrar_directory_path),
        cdiRoot=str(kubelet_plugin.cdi_root),
        healthcheckPort=kubelet_plugin.healthcheck_port,
        fabricRegistrationTimeout=f"{kubelet_plugin.fabric_registration_timeout.total_seconds():g}s",
        altProcDevicesPath=str(alt_proc_devices_path) if alt_proc_devices_path else None,
    )
    try:
        asyncio.run(run(config))
    except (DriverError, OSError) as error:
        log.error("Kubelet plugin failed", error=f"{type(error).__name__}: {error}")
        write_termination_message(f"kubelet plugin failed: {error}")
        sys.exit(1)
