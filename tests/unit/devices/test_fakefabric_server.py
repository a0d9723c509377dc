"""The fake fabric's export and import (docs/fake-fabric.md §4), with real sockets and devices.

Two fabrics ("node-a", "node-b") of one IMEX domain and one outside it ("node-c") serve on loopback
in this process; the test process is the caller, holding ``O_PATH`` fds on mknod'ed channel devices
as the probe does. Each request is judged by what the caller holds when it is made.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from imexdra_sim.devices.fakefabric.server import Fabric, request_once, serve

MAJOR = 509
"""A major number with no driver behind it, as the simulated nodes' IMEX channel major."""


@contextlib.contextmanager
def holding(directory: Path, *minors: int) -> Iterator[None]:
    """O_PATH fds held on the channel devices ``minors`` for the duration."""
    fds = []
    for minor in minors:
        node = directory / f"channel{minor}"
        if not node.exists():
            os.mknod(node, stat.S_IFCHR | 0o600, os.makedev(MAJOR, minor))
        fds.append(os.open(node, os.O_PATH))
    try:
        yield
    finally:
        for fd in fds:
            os.close(fd)


@pytest.fixture
async def fabrics() -> AsyncIterator[dict[str, tuple[str, int]]]:
    """node-a and node-b in one IMEX domain, node-c alone; their addresses by node."""
    domain: dict[str, tuple[str, int]] = {}
    servers = {}
    for node in ("node-a", "node-b", "node-c"):
        fabric = Fabric(node=node, domain=domain if node != "node-c" else {}, major=MAJOR)
        servers[node] = await serve(fabric, "127.0.0.1", 0)
    addresses = {node: server.sockets[0].getsockname()[:2] for node, server in servers.items()}
    domain.update({node: addresses[node] for node in ("node-a", "node-b")})
    yield addresses
    for server in servers.values():
        server.close()
        await server.wait_closed()


async def ask(address: tuple[str, int], op: str, **fields: Any) -> dict[str, Any]:
    return await request_once(address, {"op": op, **fields})


async def test_same_channel_imports_on_the_node_and_across_it(
    fabrics: dict[str, tuple[str, int]], tmp_path: Path
) -> None:
    """Exported on channel 7 at node-a: a holder of 7 imports it at node-a and at node-b."""
    with holding(tmp_path, 7):
        exported = await ask(fabrics["node-a"], "export")
        assert exported["channel"] == 7 and exported["handle"].startswith("node-a/")
        assert await ask(fabrics["node-a"], "import", handle=exported["handle"]) == {
            "imported": exported["handle"],
            "channel": 7,
        }
        assert (await ask(fabrics["node-b"], "import", handle=exported["handle"]))["channel"] == 7


async def test_another_channel_is_refused_naming_both(
    fabrics: dict[str, tuple[str, int]], tmp_path: Path
) -> None:
    """A holder of channel 8 (another domain's) cannot import channel 7's export, here or remotely."""
    with holding(tmp_path, 7):
        handle = (await ask(fabrics["node-a"], "export"))["handle"]
    with holding(tmp_path, 8):
        for node in ("node-a", "node-b"):
            error = (await ask(fabrics[node], "import", handle=handle))["error"]
            assert "exported on IMEX channel 7" in error and "holds [8]" in error, node
    refused = (await ask(fabrics["node-a"], "import", handle=handle))["error"]
    assert "holds no channel" in refused


async def test_export_needs_exactly_one_channel(fabrics: dict[str, tuple[str, int]], tmp_path: Path) -> None:
    """No channel or two channels: nothing to record the export under."""
    assert "holds []" in (await ask(fabrics["node-a"], "export"))["error"]
    with holding(tmp_path, 3, 4):
        assert "holds [3, 4]" in (await ask(fabrics["node-a"], "export"))["error"]


async def test_outside_the_imex_domain_nothing_is_imported(
    fabrics: dict[str, tuple[str, int]], tmp_path: Path
) -> None:
    """node-c shares no IMEX domain with node-a: even the right channel cannot import there."""
    with holding(tmp_path, 7):
        handle = (await ask(fabrics["node-a"], "export"))["handle"]
        error = (await ask(fabrics["node-c"], "import", handle=handle))["error"]
    assert "not in this node's IMEX domain" in error


async def test_bad_requests_get_errors_not_silence(fabrics: dict[str, tuple[str, int]]) -> None:
    """Unknown ops and handles are answered with what would work."""
    assert "use export, import or lookup" in (await ask(fabrics["node-a"], "copy"))["error"]
    assert "unknown handle" in (await ask(fabrics["node-a"], "lookup", handle="node-a/x"))["error"]
