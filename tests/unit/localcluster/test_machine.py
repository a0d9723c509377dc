"""A node's machine files: the CPU topology and meminfo its kubelet reads, and their mounts."""

from __future__ import annotations

from pathlib import Path

from imexdra_sim.localcluster.machine import GB200_TRAY, Machine, mount_commands, write_machine

REAL_MEMINFO = """MemTotal:       24683656 kB
MemFree:         1000000 kB
MemAvailable:    2000000 kB
Buffers:          123456 kB
SwapTotal:             0 kB
HugePages_Total:       0
Hugepagesize:       2048 kB
"""


def test_cpu_topology_has_one_directory_per_cpu_grouped_by_socket(tmp_path: Path) -> None:
    """cAdvisor counts cpu<N> directories; their physical_package_id and core_id give sockets and cores."""
    meminfo = tmp_path / "real-meminfo"
    meminfo.write_text(REAL_MEMINFO)
    binds = write_machine(
        Machine(sockets=2, cores_per_socket=3, memory_gib=4), tmp_path / "m", meminfo=meminfo
    )
    cpu = binds["/sys/devices/system/cpu"]
    assert sorted(p.name for p in cpu.glob("cpu[0-9]*")) == [f"cpu{i}" for i in range(6)]
    assert [(cpu / f"cpu{i}/topology/physical_package_id").read_text() for i in (0, 2, 3, 5)] == [
        "0\n",
        "0\n",
        "1\n",
        "1\n",
    ]
    assert (cpu / "cpu4/topology/core_id").read_text() == "1\n"
    assert (cpu / "online").read_text() == "0-5\n"
    assert list(binds["/sys/devices/system/node"].iterdir()) == []


def test_meminfo_moves_only_the_sizes(tmp_path: Path) -> None:
    """MemTotal becomes the machine's size; MemFree and MemAvailable move by the same amount; every
    other line stays the kernel's."""
    meminfo = tmp_path / "real-meminfo"
    meminfo.write_text(REAL_MEMINFO)
    binds = write_machine(GB200_TRAY, tmp_path / "m", meminfo=meminfo)
    lines = binds["/proc/meminfo"].read_text().splitlines()
    values = {line.split(":")[0]: int(line.split()[1]) for line in lines}
    delta = 1024 * 1024 * 1024 - 24683656
    assert values["MemTotal"] == 1024 * 1024 * 1024  # kB: 1024 GiB
    assert values["MemFree"] == 1000000 + delta
    assert values["MemAvailable"] == 2000000 + delta
    assert lines[3:] == REAL_MEMINFO.splitlines()[3:]
    assert GB200_TRAY.cpus == 144


def test_mount_commands_bind_each_file_over_the_kernel_s(tmp_path: Path) -> None:
    """One bind mount per path, source over target."""
    assert mount_commands({"/proc/meminfo": tmp_path / "meminfo"}) == [
        f"mount --bind {tmp_path / 'meminfo'} /proc/meminfo"
    ]
