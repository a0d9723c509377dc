"""A simulated node's own ``nvidia-imex.service``, as HostManagedIMEX expects a host to run it.

A real host runs the driver's ``nvidia-imex`` from systemd with ``/etc/nvidia-imex/config.cfg``: the
IMEX domain's node list in ``nodes_config.cfg`` and the command service on a unix socket
(``IMEX_CMD_ENABLED=1``, ``IMEX_CMD_UNIX_DOMAIN_PATH``), which is what the kubelet plugin's readiness
check asks through (docs/host-managed.md). ``HostImexService`` writes those two files into one
directory for a simulated node; ``service_argv`` is the command line that starts the node's
driver-root ``nvidia-imex`` (the fake) with them. Running the process is the simulator's business.

Not product code: the driver never starts, stops or configures a host's IMEX.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from imexdra_sim.devices.fakeimex.install import IMEX_NAME

CONFIG_NAME = "config.cfg"
NODES_NAME = "nodes_config.cfg"
SOCKET_NAME = "imex_ctrl.sock"


@dataclass(frozen=True, slots=True)
class HostImexService:
    """One node's host IMEX: its files live in ``directory``, its command socket is ``socket``."""

    directory: Path
    address: str
    """This node's address in the IMEX domain (it binds ``address:server_port``)."""
    peers: Sequence[str]
    """Every node of the IMEX domain, this one included, in node-list order."""
    server_port: int
    socket: Path

    @property
    def config(self) -> Path:
        """``config.cfg`` of this service."""
        return self.directory / CONFIG_NAME

    def write(self) -> Path:
        """Write ``nodes_config.cfg`` and ``config.cfg`` (replacing them); return the config's path."""
        self.directory.mkdir(parents=True, exist_ok=True)
        nodes = self.directory / NODES_NAME
        nodes.write_text("".join(f"{peer}\n" for peer in self.peers))
        self.config.write_text(
            f"SERVER_PORT={self.server_port}\n"
            f"BIND_INTERFACE_IP={self.address}\n"
            f"IMEX_NODE_CONFIG_FILE={nodes}\n"
            "IMEX_CMD_ENABLED=1\n"
            f"IMEX_CMD_UNIX_DOMAIN_PATH={self.socket}\n"
            "LOG_FILE_NAME=\n"
        )
        return self.config


def service_argv(config: Path, driver_root: Path) -> list[str]:
    """Run the driver root's ``nvidia-imex`` with ``config``, as the host's systemd unit would."""
    return [sys.executable, str(driver_root / "usr" / "bin" / IMEX_NAME), "-c", str(config)]
