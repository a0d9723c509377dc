"""The kubelet-facing gRPC servers on their unix sockets: our equivalent of the Go kubeletplugin helper.

``KubeletPluginServer`` owns two gRPC servers (grpclib, ``dra.grpcserver``; docs/data-path.md §5):

- the DRA server on ``<plugins dir>/<driver>/dra.sock`` (v1 and v1beta1 ``DRAPlugin``, and the
  resource-health stream when given one, ``dra.resourcehealth``), started first;
- the registration server on ``<registrar dir>/<driver>-reg.sock``, started once the DRA socket
  answers — its appearance is what makes the kubelet register the plugin.

A stale file at a socket path (a crashed predecessor) is removed before binding; both sockets are
mode 0600 whatever the umask (connecting needs write permission, and only the kubelet should);
``stop()`` closes the registration socket first (the kubelet deregisters) and removes both socket
files. Stops are hard, like upstream's: in-flight calls are cancelled, connections are closed, and
the kubelet retries the calls. ResourceSlice publishing is not part of this class.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

import structlog

from imexdra.common.errors import ConfigError
from imexdra.dra.driver import ClaimGetter, Driver
from imexdra.dra.grpcserver import GrpcServer
from imexdra.dra.nodeservice import DraService, dra_handlers
from imexdra.dra.paths import SocketPaths
from imexdra.dra.registration import RegistrationServicer
from imexdra.dra.resourcehealth import HEALTH_SERVICE, ResourceHealthServicer

if TYPE_CHECKING:
    from grpclib._typing import IServable

_log = structlog.get_logger(__name__)

# sockaddr_un.sun_path holds 108 bytes including the terminating NUL.
MAX_SOCKET_PATH_BYTES = 107
PLUGIN_DATA_DIR_MODE = 0o750
SOCKET_MODE = 0o600


class KubeletPluginServer:
    """Serve a ``Driver`` to the kubelet; use ``async with`` or ``start()``/``stop()``."""

    def __init__(
        self,
        *,
        driver: Driver,
        get_claim: ClaimGetter,
        paths: SocketPaths,
        health: ResourceHealthServicer | None = None,
    ) -> None:
        self.paths = paths
        self._service = DraService(driver, get_claim)
        self._health = health
        self._dra_server: GrpcServer | None = None
        self._registration_server: GrpcServer | None = None
        self.registration: RegistrationServicer | None = None

    async def start(self) -> None:
        """Create the plugin data dir, then serve DRA, then registration.

        Raises:
            ConfigError: a directory is missing or a socket path is unusable.

        """
        paths = self.paths
        if not paths.registrar_dir.is_dir():
            raise ConfigError(f"kubelet registrar directory {paths.registrar_dir} does not exist")
        paths.plugin_data_dir.mkdir(mode=PLUGIN_DATA_DIR_MODE, parents=True, exist_ok=True)
        try:
            servicers, versions = dra_handlers(self._service)
            handlers: list[IServable] = [*servicers]
            if self._health is not None:
                handlers.append(self._health)
                versions.append(HEALTH_SERVICE)
            self._dra_server = GrpcServer(handlers)
            await _serve(self._dra_server, paths.dra_socket)
            self.registration = RegistrationServicer(
                driver_name=paths.driver_name, endpoint=str(paths.dra_socket), supported_versions=versions
            )
            self._registration_server = GrpcServer([self.registration])
            await _serve(self._registration_server, paths.registration_socket)
        except BaseException:
            await self.stop()
            raise
        _log.info(
            "Kubelet plugin serving",
            dra_socket=str(paths.dra_socket),
            registration_socket=str(paths.registration_socket),
        )

    async def stop(self) -> None:
        """Stop both servers (registration first) and remove their socket files. Idempotent."""
        for server, socket in (
            (self._registration_server, self.paths.registration_socket),
            (self._dra_server, self.paths.dra_socket),
        ):
            if server is not None:
                await server.stop()
                _remove_socket(socket)
        self._registration_server = None
        self._dra_server = None

    async def __aenter__(self) -> KubeletPluginServer:
        """Start serving."""
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        """Stop serving."""
        await self.stop()


async def _serve(server: GrpcServer, socket: Path) -> None:
    _clear_socket_path(socket)
    try:
        await server.start_unix(socket)
    except OSError as error:
        raise ConfigError(f"cannot listen on unix socket {socket}: {error}") from error
    _restrict_socket(socket)


def _restrict_socket(socket: Path) -> None:
    # Only the kubelet (root) may connect, whatever the process umask would have allowed.
    socket.chmod(SOCKET_MODE)


def _clear_socket_path(socket: Path) -> None:
    # Quick local filesystem checks at startup; not worth a thread hop.
    if len(str(socket).encode()) > MAX_SOCKET_PATH_BYTES:
        raise ConfigError(f"unix socket path longer than {MAX_SOCKET_PATH_BYTES} bytes: {socket}")
    if socket.is_dir():
        raise ConfigError(f"a directory is in the way of socket {socket}")
    if _remove_socket(socket):
        _log.info("Removed stale socket", socket=str(socket))


def _remove_socket(socket: Path) -> bool:
    # A directory at the path is never ours (see _clear_socket_path); leave it alone.
    with contextlib.suppress(FileNotFoundError, IsADirectoryError):
        socket.unlink()
        return True
    return False
