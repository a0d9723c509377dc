"""Entry point of ``compute-domain-kubelet-plugin``: upstream's flags and variables, then ``plugin.run``.

Flags and environment variables are upstream's (kubelet-plugin.md §1.1, through the option groups of
``imexdra.api.config``). Two more select a simulated node's hardware:

- ``--fake-nvml-config`` / ``FAKE_NVML_CONFIG``: the node's fake NVML file (format in
  ``imexdra.devices.nvml_fake``) instead of the NVML library under the container driver root;
- ``--alt-proc-devices-path`` / ``ALT_PROC_DEVICES_PATH``: upstream's mock mode — this file replaces
  ``/proc/devices`` and the fabric-imex-mgmt capability is read under the container driver root.

Either one also lets the dev root hold regular files in place of device nodes. The process logs its
settings and the resolved feature gates first; it exits 0 after a signal-initiated shutdown and 1
when startup or a service fails.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import click
import structlog

from imexdra.api.config.common import (
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
from imexdra.api.config.kubelet_plugin import KubeletPluginSettings, kubelet_plugin_options
from imexdra.api.featuregates import FeatureGates, log_feature_gates
from imexdra.common.errors import ConfigError, DriverError
from imexdra.common.logging import configure_logging
from imexdra.kubeletplugin.hardware import HardwareSettings
from imexdra.kubeletplugin.plugin import PluginConfig, run

_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)


@click.command(name="compute-domain-kubelet-plugin", context_settings={"help_option_names": ["-h", "--help"]})
@logging_options
@feature_gate_options
@kube_client_options
@metrics_options
@namespace_options
@node_name_options
@imex_options
@kubelet_plugin_options
@click.option(
    "--fake-nvml-config",
    envvar="FAKE_NVML_CONFIG",
    show_envvar=True,
    type=_FILE,
    default=None,
    help="Simulated node: fake NVML file to read instead of the NVML library.",
)
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
    fake_nvml_config: Path | None,
    alt_proc_devices_path: Path | None,
) -> None:
    """The per-node DRA kubelet plugin for IMEX channels (driver compute-domain.nvidia.com)."""
    configure_logging(
        logging.verbosity, log_format=logging.logging_format.value if logging.logging_format else None
    )
    log = structlog.get_logger("imexdra.kubeletplugin")
    try:
        host_managed = imex.host_managed(feature_gates)
    except ConfigError as error:
        raise click.UsageError(str(error)) from error
    log_feature_gates(feature_gates)
    config = PluginConfig(
        node_name=node_name,
        namespace=namespace,
        kubelet=kubelet_plugin,
        gates=feature_gates,
        host_managed=host_managed,
        kube_client=kube_client,
        metrics=metrics,
        hardware=HardwareSettings(
            container_driver_root=kubelet_plugin.container_driver_root,
            host_driver_root=kubelet_plugin.nvidia_driver_root,
            fake_nvml_config=fake_nvml_config,
            alt_proc_devices=alt_proc_devices_path,
        ),
    )
    log.info(
        "Flags",
        nodeName=node_name,
        namespace=namespace,
        klogVerbosity=logging.verbosity,
        imexMode="hostManaged" if host_managed else "driverManaged",
        kubeletPluginsDirectoryPath=str(kubelet_plugin.kubelet_plugins_directory_path),
        kubeletRegistrarDirectoryPath=str(kubelet_plugin.kubelet_registrar_directory_path),
        cdiRoot=str(kubelet_plugin.cdi_root),
        healthcheckPort=kubelet_plugin.healthcheck_port,
        fakeNvmlConfig=str(fake_nvml_config) if fake_nvml_config else None,
        altProcDevicesPath=str(alt_proc_devices_path) if alt_proc_devices_path else None,
    )
    try:
        asyncio.run(run(config))
    except (DriverError, OSError) as error:
        log.error("kubelet plugin failed", error=f"{type(error).__name__}: {error}")
        sys.exit(1)
