"""Where the plugin's files and sockets live on the node (upstream's layout, docs/compatibility.md §2.7).

One place for the on-disk layout so the gRPC servers, checkpoint, lock and daemon directories agree:

- ``<plugins dir>/compute-domain.nvidia.com/`` — plugin data dir: ``dra.sock``, ``checkpoint.json``,
  ``pu.lock``, ``domains/<ComputeDomain UID>/``;
- ``<registrar dir>/compute-domain.nvidia.com-reg.sock`` — the kubelet's plugin watcher finds us here.

The two sockets are the DRA layer's (``imexdra.dra.paths``); the files are this driver's. A domain
directory is named by a ComputeDomain UID taken from a claim's opaque config (user input), so
``domain_dir`` accepts only a single plain path component: never a path outside ``domains/``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from imexdra.api.constants import DRIVER_NAME
from imexdra.common.errors import ConfigError
from imexdra.dra.paths import SocketPaths

#: NAME_MAX of Linux file systems, in bytes.
MAX_FILE_NAME_BYTES = 255


@dataclass(frozen=True, slots=True, kw_only=True)
class PluginPaths(SocketPaths):
    """The plugin's directories and the files and sockets inside them."""

    driver_name: str = DRIVER_NAME

    @property
    def prepare_lock(self) -> Path:
        """``pu.lock``: serialises prepare/unprepare of single claims across processes."""
        return self.plugin_data_dir / "pu.lock"

    @property
    def domains_dir(self) -> Path:
        """Parent of the per-ComputeDomain daemon directories (mounted at ``/imexd``)."""
        return self.plugin_data_dir / "domains"

    def domain_dir(self, domain_uid: str) -> Path:
        """``domains/<ComputeDomain UID>``.

        Raises:
            ConfigError: ``domain_uid`` is not one plain file name (empty, ``.``, ``..``, a ``/``, a
                NUL, not UTF-8, or longer than 255 bytes), so it could name a path outside ``domains/``.

        """
        if not is_plain_file_name(domain_uid):
            raise ConfigError(
                f"{domain_uid!r} cannot name a ComputeDomain directory (expected the ComputeDomain's UID)",
                field="domainID",
            )
        return self.domains_dir / domain_uid


def is_plain_file_name(name: str) -> bool:
    """Whether ``name`` names one directory entry: not ``.``/``..``, no ``/`` or NUL, UTF-8, <= 255 bytes."""
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return False
    return (
        0 < size <= MAX_FILE_NAME_BYTES and name not in (".", "..") and "/" not in name and "\0" not in name
    )
