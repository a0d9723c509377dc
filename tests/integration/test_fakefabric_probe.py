"""The fake fabric as the rack runs it, without a cluster: two fabric services of one IMEX domain
(``python -m imexdra_sim.devices.fakefabric``) and the GPU program ``imex-probe`` (sim/imexprobe)
holding mknod'ed channel devices with ``O_PATH`` (docs/fake-fabric.md).

The probe's answers are what a workload's log shows: the export's handle and channel, an import
allowed across nodes for the same channel, refused for another channel or none, with the numbers.
"""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from imexdra_sim.devices.fakefabric.service import FabricService, service_argv
from imexdra_sim.devices.procfs_fake import write_proc_devices
from imexdra_sim.localcluster.binaries import locate
from imexdra_sim.localcluster.processes import free_port
from tests.support.waiting import wait_until

MAJOR = 509
NODES = {"node-a": "127.100.201.254", "node-b": "127.100.202.254"}


@pytest.fixture
def fabrics(tmp_path: Path) -> Iterator[dict[str, str]]:
    """Both nodes' fabrics running; their ``host:port`` by node."""
    proc_devices = write_proc_devices(tmp_path / "proc-devices", imex_channels_major=MAJOR)
    port = free_port()
    addresses = {node: (host, port) for node, host in NODES.items()}
    services = {
        node: FabricService(node, address, {n: a for n, a in addresses.items() if n != node}, proc_devices)
        for node, address in addresses.items()
    }
    logs = {node: (tmp_path / f"{node}.log").open("w") for node in NODES}
    processes = [
        subprocess.Popen(service_argv(s.write(tmp_path / f"{node}.json")), stderr=logs[node])
        for node, s in services.items()
    ]
    try:
        for node in NODES:
            log = tmp_path / f"{node}.log"
            wait_until(f"{node}'s fabric listening", lambda log=log: "listening" in log.read_text())
        yield {node: s.endpoint for node, s in services.items()}
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=30)
        for log in logs.values():
            log.close()


def channels(directory: Path, *minors: int) -> Path:
    """A directory holding the channel devices ``minors`` (real character devices, as on the nodes)."""
    directory.mkdir()
    for minor in minors:
        os.mknod(directory / f"channel{minor}", stat.S_IFCHR | 0o666, os.makedev(MAJOR, minor))
    return directory


def probe(*argv: str) -> subprocess.Popen[str]:
    """``imex-probe`` started with ``argv``, its output captured."""
    return subprocess.Popen(
        [str(locate().path("imex-probe")), *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_only_a_holder_of_the_exporters_channel_imports(fabrics: dict[str, str], tmp_path: Path) -> None:
    """Exported on channel 3 at node-a: imported on channel 3 at node-b; refused on channel 4 and with
    no channel, the refusal naming both channels; the exporter holds its export until SIGTERM."""
    exporter = probe("export", "--fabric", fabrics["node-a"], "--channels", str(channels(tmp_path / "a", 3)))
    assert exporter.stdout is not None
    assert exporter.stdout.readline() == "holding IMEX channels [channel3]\n"
    _, handle, _, _, _, channel = exporter.stdout.readline().split()
    assert channel == "3" and handle.startswith("node-a/")

    def run(directory: Path) -> tuple[int, str]:
        done = probe("import", "--fabric", fabrics["node-b"], "--channels", str(directory), handle)
        out, err = done.communicate(timeout=60)
        return done.returncode, out + err

    assert run(channels(tmp_path / "same", 3)) == (
        0,
        f"holding IMEX channels [channel3]\nimported {handle} on IMEX channel 3\n",
    )
    code, out = run(channels(tmp_path / "other", 4))
    assert code == 1 and "was exported on IMEX channel 3; the caller holds [4]" in out
    code, out = run(tmp_path / "none")
    assert code == 1 and "the caller holds no channel" in out
    exporter.terminate()
    assert exporter.wait(timeout=30) == 0


def test_the_probe_explains_its_usage() -> None:
    """A missing fabric address is a usage error (exit 2) that shows the command line."""
    done = probe("import", "handle")
    _, err = done.communicate(timeout=30)
    assert done.returncode == 2 and "usage: imex-probe export|import --fabric HOST:PORT" in err
