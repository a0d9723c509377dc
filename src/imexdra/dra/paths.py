"""Where a DRA kubelet plugin's sockets live on the node (the kubelet's layout, docs/compatibility.md §2.7).

- ``<plugins dir>/<driver>/`` — the plugin data dir, holding ``dra.sock``, which the kubelet calls;
- ``<registrar dir>/<driver>-reg.sock`` — the kubelet's plugin watcher finds the plugin here.

Both directories must have the same paths inside and outside the plugin container. A driver keeps
its own files in the plugin data dir too (``imexdra.kubeletplugin.paths`` extends this class).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEFAULT_PLUGINS_DIR = Path("/var/lib/kubelet/plugins")
DEFAULT_REGISTRAR_DIR = Path("/var/lib/kubelet/plugins_registry")


@dataclass(frozen=True, slots=True, kw_only=True)
class SocketPaths:
    """A plugin's two kubelet directories and the sockets inside them."""

    plugins_dir: Path = DEFAULT_PLUGINS_DIR
    registrar_dir: Path = DEFAULT_REGISTRAR_DIR
    driver_name: str

    @property
    def plugin_data_dir(self) -> Path:
        """``<plugins dir>/<driver>``."""
        return self.plugins_dir / self.driver_name

    @property
    def dra_socket(self) -> Path:
        """The DRA gRPC socket the kubelet calls for prepare/unprepare."""
        return self.plugin_data_dir / "dra.sock"

    @property
    def registration_socket(self) -> Path:
        """The registration socket the kubelet's plugin watcher discovers."""
        return self.registrar_dir / f"{self.driver_name}-reg.sock"
