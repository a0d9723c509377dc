"""The update loop end to end on files and a FakeImex: DNS mode reloads, IP mode restarts.

On looptime's virtual clock: the supervisor's reload interval passes at no real cost.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from imexdra.common.pacing.ratelimit import Backoff
from imexdra.daemon.hostsfile import managed_mappings
from imexdra.daemon.imexconfig import ImexdPaths
from imexdra.daemon.membership import Membership, Peer
from imexdra.daemon.peers import Latest
from imexdra.daemon.planning import Action
from imexdra.daemon.supervisor import ImexSupervisor
from imexdra.daemon.updater import Updater
from imexdra_sim.devices.imex_fake import FakeImex
from tests.support.waiting import eventually

pytestmark = pytest.mark.looptime

A, B, C = Peer("node-a", "10.0.0.1", 0), Peer("node-b", "10.0.0.2", 1), Peer("node-c", "10.0.0.3", 2)
UID = "4c1d2a8e-7f3b-4e0a-9b6d-2e5f8a1c3d70"  # its hash, 64f89983, is checked in test_imexconfig


@pytest.fixture
async def imex() -> AsyncIterator[tuple[FakeImex, ImexSupervisor]]:
    """A running supervisor (reload interval 0.2 s) over a FakeImex."""
    fake = FakeImex()
    supervisor = ImexSupervisor(fake, restart_backoff=Backoff(base=0.01, cap=0.1), reload_interval=0.2)
    task = asyncio.create_task(supervisor.run())
    yield fake, supervisor
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def updater(tmp_path: Path, supervisor: ImexSupervisor, *, dns_names: bool, max_nodes: int = 18) -> Updater:
    return Updater(
        paths=ImexdPaths(tmp_path / "imexd"),
        hosts_file=tmp_path / "hosts",
        supervisor=supervisor,
        dns_names=dns_names,
        domain_uid=UID,
        max_nodes=max_nodes,
    )


async def started(fake: FakeImex, count: int = 1) -> int:
    """Wait until the supervisor has started IMEX ``count`` times and it runs; return its PID."""
    return await eventually(
        f"IMEX started {count} time(s)",
        lambda: len(fake.starts) == count and fake.pid,
        within=5,
        interval=0.01,
    )


async def test_dns_mode_start_then_reload(tmp_path: Path, imex: tuple[FakeImex, ImexSupervisor]) -> None:
    """IMEX starts once the own entry exists; a joining peer rewrites hosts and sends SIGUSR1, same PID."""
    fake, supervisor = imex
    (tmp_path / "hosts").write_text("127.0.0.1 localhost\n")
    loop = updater(tmp_path, supervisor, dns_names=True)
    assert (await loop.apply(Membership(peers=(A,), own=None))).action is Action.NONE
    assert fake.starts == [] and "compute-domain-daemon" not in (tmp_path / "hosts").read_text()
    assert (await loop.apply(Membership(peers=(A, B), own=B))).action is Action.START
    pid = await started(fake)
    mappings = managed_mappings((tmp_path / "hosts").read_text())
    assert len(mappings) == 18
    assert mappings["compute-domain-daemon-64f89983-0000"] == "10.0.0.1"
    assert mappings["compute-domain-daemon-64f89983-0001"] == "10.0.0.2"
    assert mappings["compute-domain-daemon-64f89983-0002"] == "127.0.0.2"
    assert (await loop.apply(Membership(peers=(A, B, C), own=B))).action is Action.RELOAD
    await eventually("the SIGUSR1", lambda: fake.signals, within=5, interval=0.01)
    assert [(r.pid, r.signum) for r in fake.signals] == [(pid, signal.SIGUSR1)]
    assert len(fake.starts) == 1
    assert "10.0.0.3\tcompute-domain-daemon-64f89983-0002\n" in (tmp_path / "hosts").read_text()


async def test_dns_mode_files_in_upstreams_format(
    tmp_path: Path, imex: tuple[FakeImex, ImexSupervisor]
) -> None:
    """The hosts file of an upgraded pod: the old-shape lines go, every slot of the new shape is there."""
    _, supervisor = imex
    (tmp_path / "hosts").write_text(
        "127.0.0.1\tlocalhost\n10.9.0.7\tcomputedomain-daemon-abc-x1\n"
        "# Compute Domain Daemon mappings\n10.0.0.1\tcompute-domain-daemon-0000\n"
        "10.0.0.5\tcompute-domain-daemon-0003\n"
    )
    loop = updater(tmp_path, supervisor, dns_names=True, max_nodes=4)
    assert (await loop.apply(Membership(peers=(A, C), own=A))).action is Action.START
    assert (tmp_path / "hosts").read_text() == (
        "127.0.0.1\tlocalhost\n10.9.0.7\tcomputedomain-daemon-abc-x1\n\n"
        "# Compute Domain Daemon mappings\n"
        "10.0.0.1\tcompute-domain-daemon-64f89983-0000\n"
        "127.0.0.2\tcompute-domain-daemon-64f89983-0001\n"
        "10.0.0.3\tcompute-domain-daemon-64f89983-0002\n"
        "127.0.0.2\tcompute-domain-daemon-64f89983-0003\n"
    )


async def test_ip_mode_writes_nodes_and_restarts(
    tmp_path: Path, imex: tuple[FakeImex, ImexSupervisor]
) -> None:
    """IP mode writes nodes.cfg in index order and restarts IMEX when it changes."""
    fake, supervisor = imex
    (tmp_path / "imexd").mkdir()
    loop = updater(tmp_path, supervisor, dns_names=False)
    await loop.apply(Membership(peers=(A, B), own=B, expected=2))
    await started(fake)
    nodes = tmp_path / "imexd" / "nodes.cfg"
    assert nodes.read_text() == "10.0.0.1\n10.0.0.2\n"
    await loop.apply(Membership(peers=(A, B, C), own=B, expected=0))
    await started(fake, 2)
    assert nodes.read_text() == "10.0.0.1\n10.0.0.2\n10.0.0.3\n"
    assert len(fake.stops) == 1 and fake.signals == []
    assert not (tmp_path / "hosts").exists()


async def test_run_follows_the_newest_membership(
    tmp_path: Path, imex: tuple[FakeImex, ImexSupervisor]
) -> None:
    """run() applies what the watcher publishes; a burst is applied as its last value."""
    fake, supervisor = imex
    loop = updater(tmp_path, supervisor, dns_names=True)
    box: Latest[Membership] = Latest()
    task = asyncio.create_task(loop.run(box))
    for peers in ((B,), (A, B), (A, B, C)):
        box.publish(Membership(peers=peers, own=B))
    await eventually(
        "the newest membership applied",
        lambda: (loop.applied.hosts or {}).get("compute-domain-daemon-64f89983-0002") == "10.0.0.3",
        within=5,
        interval=0.01,
    )
    await started(fake)
    task.cancel()
