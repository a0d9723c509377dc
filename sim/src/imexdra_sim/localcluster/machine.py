"""A simulated node's machine — how many CPUs and how much memory its kubelet finds.

The kubelet learns its node's size from cAdvisor, which counts logical CPUs in
``/sys/devices/system/cpu/cpu<N>/topology`` (grouped by NUMA node under ``/sys/devices/system/node``,
or by socket when there is none) and reads ``MemTotal`` from ``/proc/meminfo``. It reports those as the
Node's ``cpu`` and ``memory`` capacity, and its admission refuses pods that do not fit. A GB200 compute
tray has two Grace CPUs of 72 cores each; the machine the tests run on has 2. So, as the GPUs are faked
at NVML and ``/dev``, the tray's size is faked at the files the kernel would show: :func:`write_machine`
writes a CPU topology and a meminfo of the chosen size, and the node's mount namespace binds them over
those three paths (docs/node-runtime.md §8). Everything in the node's namespace sees the tray's size, as
everything on a real tray would; containers of containerd nodes mount their own ``/sys`` and ``/proc``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

_GIB_IN_KB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Machine:
    """A node's CPUs (sockets x cores, no SMT) and memory."""

    sockets: int
    cores_per_socket: int
    memory_gib: int

    @property
    def cpus(self) -> int:
        """Logical CPUs: what the Node's ``cpu`` capacity becomes."""
        return self.sockets * self.cores_per_socket


GB200_TRAY = Machine(sockets=2, cores_per_socket=72, memory_gib=1024)
"""A GB200 NVL72 compute tray as the seeds' workloads expect it: 2 Grace CPUs x 72 cores, and enough
memory for the seed MPIJob's worker (960 GiB) beside the node's own pods."""


def write_machine(
    machine: Machine, directory: Path, *, meminfo: Path = Path("/proc/meminfo")
) -> dict[str, Path]:
    """Write ``machine``'s files under ``directory``; return the bind mounts (target -> source).

    The meminfo is the real one with ``MemTotal``, ``MemFree`` and ``MemAvailable`` moved by the
    difference in size, so every other line (buffers, swap, huge pages) stays what the kernel says.
    """
    cpu_dir = directory / "cpu"
    for cpu in range(machine.cpus):
        topology = cpu_dir / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True, exist_ok=True)
        (topology / "physical_package_id").write_text(f"{cpu // machine.cores_per_socket}\n")
        (topology / "core_id").write_text(f"{cpu % machine.cores_per_socket}\n")
    last = machine.cpus - 1
    for name in ("online", "possible", "present"):
        (cpu_dir / name).write_text(f"0-{last}\n")
    node_dir = directory / "node"  # no NUMA nodes: cAdvisor groups the CPUs by socket
    node_dir.mkdir(parents=True, exist_ok=True)
    meminfo_file = directory / "meminfo"
    meminfo_file.write_text(_scaled_meminfo(meminfo.read_text(), machine.memory_gib * _GIB_IN_KB))
    return {
        "/sys/devices/system/cpu": cpu_dir,
        "/sys/devices/system/node": node_dir,
        "/proc/meminfo": meminfo_file,
    }


def mount_commands(binds: dict[str, Path]) -> list[str]:
    """Shell lines that bind the machine's files over the kernel's (in the node's mount namespace)."""
    return [f"mount --bind {source} {target}" for target, source in binds.items()]


def _scaled_meminfo(real: str, total_kb: int) -> str:
    fields = {
        line.split(":", 1)[0]: int(line.split()[1]) for line in real.splitlines() if line.endswith(" kB")
    }
    delta = total_kb - fields["MemTotal"]
    lines = []
    for line in real.splitlines():
        name = line.split(":", 1)[0]
        if name in ("MemTotal", "MemFree", "MemAvailable"):
            line = f"{name + ':':<16}{fields[name] + delta:>8} kB"
        lines.append(line)
    return "\n".join(lines) + "\n"
