"""Options only the kubelet plugin takes: kubelet directories, CDI, driver root, health check.

Names, variables and defaults are upstream's (docs/compatibility.md §2.8); so are the derived socket
and data paths (docs/compatibility.md §2.7), which the kubelet relies on to find the plugin. One is
ours: ``--fabric-registration-timeout``, how long startup waits for a GPU's NVLink fabric
registration (upstream has no such wait, docs/compatibility.md §3.2).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import click

from imexdra.api.flags.groups import GoDuration, OptionGroup, check_absolute, option
from imexdra.common.errors import ConfigError

_PATH = click.Path(path_type=Path)


@dataclass(frozen=True, slots=True)
class KubeletPluginSettings:
    """Where the kubelet, CDI and the NVIDIA driver live, and the health-check port."""

    kubelet_registrar_directory_path: Path
    kubelet_plugins_directory_path: Path
    cdi_root: Path
    nvidia_driver_root: Path
    container_driver_root: Path
    #: Upstream's nvidia-cdi-hook location; imexdra's specs run no hooks, so only ``None`` is accepted.
    nvidia_cdi_hook_path: Path | None
    imex_host_socket_path: Path
    #: ``< 0`` disables the gRPC health server, ``0`` picks a free port.
    healthcheck_port: int
    gpu_clique_label_enabled: bool
    #: How long startup waits while a GPU's fabric registration is incomplete; zero: not at all.
    fabric_registration_timeout: timedelta

    def __post_init__(self) -> None:
        """Require absolute paths: they are shared with the kubelet and the container runtime."""
        for name in (
            "kubelet_registrar_directory_path",
            "kubelet_plugins_directory_path",
            "cdi_root",
            "nvidia_driver_root",
            "container_driver_root",
            "nvidia_cdi_hook_path",
            "imex_host_socket_path",
        ):
            value = getattr(self, name)
            if value is not None:
                check_absolute(value, field=name)
        if self.fabric_registration_timeout < timedelta(0):
            raise ConfigError("must not be negative", field="fabric_registration_timeout")
        if self.nvidia_cdi_hook_path is not None:
            # Refused, not ignored: an operator setting it expects hooks to run (docs/driver-root.md).
            raise ConfigError(
                f"{self.nvidia_cdi_hook_path} is not used: imexdra's CDI specs run no hooks (the base spec "
                "bind-mounts the driver's nvidia-imex and nvidia-imex-ctl and the device nodes, all an IMEX "
                "daemon needs; docs/driver-root.md). Unset it (chart value nvidiaCDIHookPath)",
                field="nvidia_cdi_hook_path",
            )


kubelet_plugin_options = OptionGroup(
    "kubelet_plugin",
    KubeletPluginSettings,
    option(
        "--kubelet-registrar-directory-path",
        envvar="KUBELET_REGISTRAR_DIRECTORY_PATH",
        type=_PATH,
        default=Path("/var/lib/kubelet/plugins_registry"),
        help="Directory where the kubelet looks for plugin registration sockets.",
    ),
    option(
        "--kubelet-plugins-directory-path",
        envvar="KUBELET_PLUGINS_DIRECTORY_PATH",
        type=_PATH,
        default=Path("/var/lib/kubelet/plugins"),
        help="Directory holding the plugins' data directories and DRA sockets.",
    ),
    option(
        "--cdi-root",
        envvar="CDI_ROOT",
        type=_PATH,
        default=Path("/etc/cdi"),
        help="Directory for the generated CDI spec files.",
    ),
    option(
        "--nvidia-driver-root",
        envvar=["NVIDIA_DRIVER_ROOT", "HOST_DRIVER_ROOT"],
        type=_PATH,
        default=Path("/"),
        help="Host path of the NVIDIA driver installation.",
    ),
    option(
        "--container-driver-root",
        envvar="DRIVER_ROOT_CTR_PATH",
        type=_PATH,
        default=Path("/driver-root"),
        help="Where the driver root is mounted in this container.",
    ),
    option(
        "--nvidia-cdi-hook-path",
        envvar="NVIDIA_CDI_HOOK_PATH",
        type=_PATH,
        default=None,
        help="Upstream's nvidia-cdi-hook executable; imexdra runs no CDI hooks, so setting it is an error.",
    ),
    option(
        "--imex-host-socket-path",
        envvar="IMEX_HOST_SOCKET_PATH",
        type=_PATH,
        default=Path("/etc/nvidia-imex/imex_ctrl.sock"),
        help="Command socket of the host's nvidia-imex (host-managed mode).",
    ),
    option(
        "--healthcheck-port",
        envvar="HEALTHCHECK_PORT",
        type=click.IntRange(min=-1, max=65535),
        default=-1,
        help="Port of the gRPC health server; -1 disables it, 0 picks a free port.",
    ),
    option(
        "--gpu-clique-label-enabled",
        envvar="GPU_CLIQUE_LABEL_ENABLED",
        is_flag=True,
        default=False,
        help="Maintain the nvidia.com/gpu.clique node label.",
    ),
    option(
        "--fabric-registration-timeout",
        envvar="FABRIC_REGISTRATION_TIMEOUT",
        type=GoDuration(),
        default="5m",
        help="How long startup waits for a GPU's NVLink fabric registration to complete (a reboot race) "
        "before failing; 0 fails at once, as upstream does.",
    ),
)
