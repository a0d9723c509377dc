"""The fake nvidia-imex / nvidia-imex-ctl as separate processes talking over real loopback sockets.

Covered: readiness needs no quorum and survives a lost peer (which degrades the domain), the node
list is re-read only on SIGUSR1 and SIGUSR1 is rate-limited, names resolve through the hosts file (the
daemon's own files too: per-domain names, unused slots at the sentinel address), node-map mismatches
(a daemon of another domain at a reused address) and an own-ID change keep a daemon NOT_READY, one
IMEX daemon per node (the second fails with NV_ERR_IN_USE, and the daemon's supervisor gives up on it
clearly), the ctl output shapes, the command service over TCP and a unix socket, startup failure
without an own entry, and the PATH wrappers.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import random
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from imexdra.common.pacing.ratelimit import Backoff
from imexdra.daemon.hostsfile import render_hosts
from imexdra.daemon.imexconfig import UNUSED_SLOT_ADDRESS, dns_name, dns_nodes_config
from imexdra.daemon.supervisor import ImexInUseError, ImexSupervisor
from imexdra.devices.imex import READY_OUTPUT
from imexdra.devices.imex_real import SubprocessImex
from imexdra_sim.devices.fakeimex.ctl import CtlError, fetch_status
from imexdra_sim.devices.fakeimex.install import install_fake_imex
from tests.support import waiting

PYTHON = sys.executable


def _free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


@dataclass
class FakeDomain:
    """Config files, a shared node list and hosts file, and the fake daemons started from them."""

    tmp: Path
    prefix: str = field(default_factory=lambda: f"127.{random.randint(150, 250)}.{random.randint(0, 255)}")
    processes: dict[str, subprocess.Popen[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.server_port = _free_port(f"{self.prefix}.1")
        self.cmd_port = _free_port(f"{self.prefix}.1")
        self.nodes_file = self.tmp / "nodes.cfg"
        self.hosts_file = self.tmp / "hosts"
        self.hosts_file.write_text("127.0.0.1 localhost\n")

    def address(self, i: int) -> str:
        return f"{self.prefix}.{i}"

    def set_nodes(self, entries: list[str], path: Path | None = None) -> None:
        (path or self.nodes_file).write_text("".join(f"{e}\n" for e in entries))

    def config(self, i: int, *, nodes_file: Path | None = None, unix: str = "") -> Path:
        path = self.tmp / f"imex-{i}.cfg"
        path.write_text(
            f"SERVER_PORT={self.server_port}\n"
            f"IMEX_NODE_CONFIG_FILE={nodes_file or self.nodes_file}\n"
            "IMEX_CMD_ENABLED=1\n"
            f"IMEX_CMD_PORT={self.cmd_port}\n"
            f"IMEX_CMD_BIND_INTERFACE_IP={self.address(i)}\n"
            f"IMEX_CMD_UNIX_DOMAIN_PATH={unix}\n"
            "LOG_FILE_NAME=\n"
        )
        return path

    def start(self, i: int, env: dict[str, str] | None = None, **config: Any) -> subprocess.Popen[str]:
        env = {
            **os.environ,
            "FAKE_IMEX_HOSTS_FILE": str(self.hosts_file),
            "FAKE_IMEX_PROBE_INTERVAL": "0.1",
            **(env or {}),
        }
        process = subprocess.Popen(
            [PYTHON, "-m", "imexdra_sim.devices.fakeimex.daemon", "-c", str(self.config(i, **config))],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.processes[self.address(i)] = process
        return process

    async def status(self, i: int) -> dict[str, Any]:
        return fetch_status((self.address(i), self.cmd_port))

    async def maybe_status(self, i: int) -> dict[str, Any]:
        """The status, or an empty dict while the daemon does not answer yet."""
        try:
            return await self.status(i)
        except CtlError:
            return {}

    async def state(self, i: int) -> str:
        return str((await self.maybe_status(i)).get("state", "UNREACHABLE"))

    def ctl(self, i: int, *args: str) -> subprocess.CompletedProcess[str]:
        config = self.tmp / f"imex-{i}.cfg"
        command = [PYTHON, "-m", "imexdra_sim.devices.fakeimex.ctl", "-c", str(config), *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)

    def signal(self, i: int, signum: int = signal.SIGUSR1) -> None:
        self.processes[self.address(i)].send_signal(signum)


#: The fake daemons answer within a tenth of a second; forming a domain takes a few.
eventually = functools.partial(waiting.eventually, within=15.0, interval=0.1)


@pytest.fixture
def domain(tmp_path: Path) -> Iterator[FakeDomain]:
    """A fresh fake domain on its own loopback /24; every daemon is stopped afterwards."""
    fake = FakeDomain(tmp_path)
    yield fake
    for process in fake.processes.values():
        if process.poll() is None:
            process.terminate()
    for process in fake.processes.values():
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


def states(domain: FakeDomain, *nodes: int) -> Callable[[], Any]:
    """An async check returning the states of ``nodes``."""

    async def check() -> list[str]:
        return [await domain.state(i) for i in nodes]

    return check


async def test_single_node_is_ready_and_query_is_exact(domain: FakeDomain) -> None:
    """A one-node domain is READY; ``-q`` prints exactly READY and a newline and exits 0."""
    domain.set_nodes([domain.address(1)])
    domain.start(1)
    await eventually("READY", lambda: _is(domain, 1, "READY"))
    result = domain.ctl(1, "-q")
    assert (result.returncode, result.stdout) == (0, READY_OUTPUT)


async def _is(domain: FakeDomain, i: int, state: str) -> bool:
    return await domain.state(i) == state


async def test_ready_without_quorum_and_degraded_until_every_peer_answers(domain: FakeDomain) -> None:
    """With one of three daemons missing the others are READY, the domain DEGRADED; then UP."""
    domain.set_nodes([domain.address(i) for i in (1, 2, 3)])
    domain.start(1)
    domain.start(2)
    await eventually("1 and 2 READY", lambda: _all_ready(domain, 1, 2))
    await eventually("1 sees 2", lambda: _matrix_row(domain, 1, {"0": "C", "1": "C", "2": "N"}))
    assert "Domain State: DEGRADED" in domain.ctl(2, "-N").stdout
    domain.start(3)
    await eventually("all READY", lambda: _all_ready(domain, 1, 2, 3))
    await eventually("2 sees everyone", lambda: _matrix_row(domain, 2, {"0": "C", "1": "C", "2": "C"}))
    table = domain.ctl(2, "-N").stdout
    assert "Domain State: UP" in table
    assert f"Node #2   - {domain.address(3):<15} - READY" in table


async def _all_ready(domain: FakeDomain, *nodes: int) -> bool:
    return await states(domain, *nodes)() == ["READY"] * len(nodes)


async def test_lost_peer_degrades_the_domain_and_leaves_the_survivor_ready(domain: FakeDomain) -> None:
    """A killed peer shows as R and the survivor stays READY; the node list is re-read on SIGUSR1 only."""
    domain.set_nodes([domain.address(i) for i in (1, 2)])
    survivor = domain.start(1)
    victim = domain.start(2)
    await eventually("both connected", lambda: _matrix_row(domain, 1, {"0": "C", "1": "C"}))
    victim.kill()
    await eventually("the lost peer recovering", lambda: _matrix_row(domain, 1, {"1": "R"}))
    assert await domain.state(1) == "READY"
    assert (await domain.status(1))["domainState"] == "DEGRADED"
    domain.set_nodes([domain.address(1)])

    async def degraded() -> bool:
        return (await domain.status(1))["domainState"] == "DEGRADED"

    await waiting.stays_true("DEGRADED: no re-read of the node list without SIGUSR1", degraded, 0.5, 0.1)
    domain.signal(1)
    await eventually("UP after reload", lambda: _field(domain, 1, "domainState", "UP"))
    status = await domain.status(1)
    assert (status["pid"], status["reloads"], status["state"]) == (survivor.pid, 1, "READY")


async def test_sigusr1_is_processed_at_most_once_per_five_seconds(domain: FakeDomain) -> None:
    """A second SIGUSR1 right after the first is ignored and counted."""
    domain.set_nodes([domain.address(1)])
    domain.start(1)
    await eventually("READY", lambda: _is(domain, 1, "READY"))
    domain.signal(1)
    await eventually("first reload", lambda: _field(domain, 1, "reloads", 1))
    domain.signal(1)
    await eventually("second ignored", lambda: _field(domain, 1, "ignoredSignals", 1))
    assert (await domain.status(1))["reloads"] == 1


async def _field(domain: FakeDomain, i: int, key: str, value: Any) -> bool:
    return bool((await domain.maybe_status(i)).get(key) == value)


async def test_dns_names_resolve_through_hosts_file(domain: FakeDomain) -> None:
    """Unmapped names are not members; mapping one and sending SIGUSR1 adds it as a peer."""
    names = [f"compute-domain-daemon-{i:04d}" for i in range(4)]
    domain.set_nodes(names)
    hosts = "".join(f"{domain.address(i + 1)}\t{names[i]}\n" for i in range(2))
    domain.hosts_file.write_text(hosts)
    domain.start(1)
    domain.start(2)
    await eventually("two mapped daemons READY", lambda: _all_ready(domain, 1, 2))
    assert "compute-domain-daemon-0003 - UNAVAILABLE" in domain.ctl(1, "-N").stdout
    domain.hosts_file.write_text(hosts + f"{domain.address(3)}\t{names[2]}\n")
    domain.start(3)
    await eventually("newcomer READY", lambda: _is(domain, 3, "READY"))
    assert await domain.state(1) == "READY", "old members do not see the new name before SIGUSR1"
    assert (await domain.status(1))["matrix"]["0"]["2"] == "I"
    domain.signal(1)
    domain.signal(2)
    everyone = {"0": "C", "1": "C", "2": "C"}
    await eventually("peer added after reload", lambda: _matrix_row(domain, 1, everyone))
    assert await _all_ready(domain, 1, 2, 3)


async def test_daemon_files_with_sentinels_form_the_domain(domain: FakeDomain) -> None:
    """The daemon's nodes.cfg and hosts file (upstream #1448/#1465 shapes) give a READY domain whose
    unused slots resolve to 127.0.0.2 and never answer; a daemon of another domain is told apart."""
    uid, other_uid = "4c1d2a8e-7f3b-4e0a-9b6d-2e5f8a1c3d70", "0b9e8f1a-3c2d-4e5f-8a7b-6c5d4e3f2a10"
    domain.nodes_file.write_text(dns_nodes_config(uid, 4))
    mapping = {dns_name(uid, i): UNUSED_SLOT_ADDRESS for i in range(4)}
    mapping |= {dns_name(uid, 0): domain.address(1), dns_name(uid, 2): domain.address(2)}
    domain.hosts_file.write_text(render_hosts("127.0.0.1 localhost\n", mapping))
    domain.start(1)
    domain.start(2)
    await eventually("slots 0 and 2 connected", lambda: _matrix_row(domain, 1, {"0": "C", "2": "C"}))
    status = await domain.status(1)
    assert status["state"] == "READY"
    assert [(n["entry"], n["address"]) for n in status["nodes"]] == [
        (dns_name(uid, i), address)
        for i, address in enumerate((domain.address(1), "127.0.0.2", domain.address(2), "127.0.0.2"))
    ]
    assert status["matrix"]["0"]["1"] == status["matrix"]["0"]["3"] == "N"
    # Slot 3 now points at a daemon of another domain (a reused pod IP): its node list differs.
    other_nodes = domain.tmp / "other-nodes.cfg"
    other_nodes.write_text(dns_nodes_config(other_uid, 4))
    mapping[dns_name(uid, 3)] = domain.address(3)
    mapping[dns_name(other_uid, 0)] = domain.address(3)
    domain.hosts_file.write_text(render_hosts("127.0.0.1 localhost\n", mapping))
    domain.start(3, nodes_file=other_nodes)
    await eventually("the other domain's daemon READY", lambda: _is(domain, 3, "READY"))
    domain.signal(1)
    await eventually("mismatch seen", lambda: _matrix_row(domain, 1, {"3": "!M!"}))
    assert await domain.state(1) == "NOT_READY"


async def _matrix_row(domain: FakeDomain, i: int, expected: dict[str, str]) -> bool:
    row = (await domain.maybe_status(i)).get("matrix", {}).get("0", {})
    return all(row.get(k) == v for k, v in expected.items())


async def test_node_map_mismatch_is_not_ready(domain: FakeDomain) -> None:
    """A peer with a different node list is !M! and keeps both sides NOT_READY."""
    domain.set_nodes([domain.address(1), domain.address(2)])
    other = domain.tmp / "other-nodes.cfg"
    domain.set_nodes([domain.address(1), domain.address(2), "unresolvable-name"], path=other)
    domain.start(1)
    domain.start(2, nodes_file=other)
    await eventually("mismatch seen", lambda: _matrix_row(domain, 1, {"1": "!M!"}))
    await eventually("both sides NOT_READY", lambda: _is(domain, 2, "NOT_READY"))
    assert await states(domain, 1, 2)() == ["NOT_READY", "NOT_READY"]


async def test_own_index_change_needs_a_restart(domain: FakeDomain) -> None:
    """After a reload that moves this daemon to another ID it stays NOT_READY until restarted."""
    names = ["compute-domain-daemon-0000", "compute-domain-daemon-0001"]
    domain.set_nodes(names)
    domain.hosts_file.write_text(f"{domain.address(1)}\t{names[0]}\n")
    first = domain.start(1)
    await eventually("READY as ID 0", lambda: _is(domain, 1, "READY"))
    domain.hosts_file.write_text(f"{domain.address(1)}\t{names[1]}\n")
    domain.signal(1)
    await eventually("NOT_READY after the move", lambda: _is(domain, 1, "NOT_READY"))
    assert "restart required" in (await domain.status(1))["nodeMapError"]
    first.terminate()
    assert first.wait(timeout=10) == 0
    domain.start(1)
    await eventually("READY as ID 1 after restart", lambda: _field(domain, 1, "selfIndex", 1))
    assert await domain.state(1) == "READY"


async def test_one_imex_daemon_per_node_role(domain: FakeDomain) -> None:
    """With the node's IMEX role held (the host's service), a second daemon exits 1 with NV_ERR_IN_USE;
    once the holder is gone it starts."""
    role = {"FAKE_IMEX_NODE_LOCK": str(domain.tmp / "imex-role")}
    domain.set_nodes([domain.address(1), domain.address(2)])
    host = domain.start(1, env=role)
    await eventually("the holder READY", lambda: _is(domain, 1, "READY"))
    second = domain.start(2, env=role)
    assert second.wait(timeout=30) == 1
    assert second.stderr is not None
    assert "NV_ERR_IN_USE" in second.stderr.read()
    host.terminate()
    assert host.wait(timeout=10) == 0
    domain.start(2, env=role)
    await eventually("the second READY once the role is free", lambda: _is(domain, 2, "READY"))


async def test_supervisor_gives_up_on_a_node_whose_role_is_taken(domain: FakeDomain, tmp_path: Path) -> None:
    """The daemon's supervisor over the fake program: repeated NV_ERR_IN_USE ends its run clearly."""
    role = str(domain.tmp / "imex-role")
    domain.set_nodes([domain.address(1), domain.address(2)])
    domain.start(1, env={"FAKE_IMEX_NODE_LOCK": role})
    await eventually("the holder READY", lambda: _is(domain, 1, "READY"))
    binaries = install_fake_imex(tmp_path / "bin")
    imex = SubprocessImex(domain.config(2), imex_binary=str(binaries.imex), ctl_binary=str(binaries.ctl))
    supervisor = ImexSupervisor(imex, restart_backoff=Backoff(base=0.01, cap=0.05, jitter=0.0))
    supervisor.start()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FAKE_IMEX_NODE_LOCK", role)
        with pytest.raises(ImexInUseError, match="NV_ERR_IN_USE 3 times in a row"):
            await asyncio.wait_for(supervisor.run(), timeout=60.0)
    assert supervisor.starts == 3
    assert any("NV_ERR_IN_USE" in line for line in imex.output_tail)


def test_exits_when_no_entry_matches_own_address(domain: FakeDomain) -> None:
    """Like IMEX, the fake refuses to start when the node list does not contain its address."""
    domain.set_nodes([domain.address(9)])
    process = domain.start(1)
    assert process.wait(timeout=30) == 1
    assert process.stderr is not None
    assert "No matching network interface found" in process.stderr.read()


def test_ctl_reports_an_unreachable_daemon(domain: FakeDomain) -> None:
    """``-q`` against a daemon that is not running fails with exit 1 and says where it looked."""
    domain.config(1)
    result = domain.ctl(1, "-q")
    assert result.returncode == 1
    assert f"Unable to connect to the IMEX daemon at {domain.address(1)}:{domain.cmd_port}" in result.stderr


async def test_ctl_over_unix_socket_and_json(domain: FakeDomain, short_dir: Path) -> None:
    """The command service also listens on its unix socket; ``-N -j`` is JSON of the same table."""
    socket_path = str(short_dir / "imex.sock")
    domain.set_nodes([domain.address(1)])
    domain.start(1, unix=socket_path)
    await eventually("READY", lambda: _is(domain, 1, "READY"))
    result = subprocess.run(
        [PYTHON, "-m", "imexdra_sim.devices.fakeimex.ctl", "-q", f"--u={socket_path}"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert (result.returncode, result.stdout) == (0, READY_OUTPUT)
    document = json.loads(domain.ctl(1, "-N", "-j").stdout)
    assert document["status"] == "UP"
    assert document["nodes"]["0"]["status"] == "READY"


def test_install_writes_self_contained_programs(tmp_path: Path) -> None:
    """Both programs run under a bare python3 with nothing installed (as in a daemon container)."""
    binaries = install_fake_imex(tmp_path / "bin")
    assert {binaries.imex.name, binaries.ctl.name} == {"nvidia-imex", "nvidia-imex-ctl"}
    # Debian's own interpreter, no virtualenv and no site-packages of the project: only the archive.
    bare = {"PATH": "/usr/bin:/bin"}

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30, env=bare, check=False)

    result = run(str(binaries.ctl), "--help")
    assert result.returncode == 0 and "usage: nvidia-imex-ctl" in result.stdout
    result = run(str(binaries.imex), "-c", str(tmp_path / "missing.cfg"))
    assert result.returncode == 1 and "cannot use config file" in result.stderr
