"""Serving a subset of a test stand-in's gRPC methods with the plugin's own grpclib plumbing.

A stand-in plugin implements the registration and the DRA service in one class; each socket must
serve only its own service, so each gets the mapping of one generated base class.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from grpclib.const import Handler

from imexdra.dra.grpcserver import GrpcServer


class _Mapping:
    def __init__(self, mapping: dict[str, Handler]) -> None:
        self._mapping = mapping

    def __mapping__(self) -> dict[str, Handler]:
        return self._mapping


async def serve_unix(servicer: Any, base: type, socket: Path) -> GrpcServer:
    """Serve ``base``'s methods of ``servicer`` on the unix socket ``socket``."""
    server = GrpcServer([_Mapping(base.__mapping__(servicer))])
    await server.start_unix(socket)
    return server


async def stop_unix(server: GrpcServer, socket: Path) -> None:
    """Stop ``server`` and remove its socket file (which deregisters a plugin)."""
    await server.stop()
    with contextlib.suppress(FileNotFoundError):
        socket.unlink()
