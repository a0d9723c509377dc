"""The pod network joining containerd nodes: a switch in a network namespace the harness owns.

Layout (docs/node-runtime.md §6), for fabric index ``k`` (one per running cluster on the machine):

* a **switch** namespace, held open by a ``sleep`` the cluster supervises, with bridge ``br0``;
* the machine's namespace joins it through one veth, ``imx<k>h``, holding ``10.(200+k).0.1/24``:
  the apiserver listens there, so nodes and pods reach it and the machine's own clients do too;
* each containerd node ``i`` is a namespace of its own (its containerd, kubelet and kube-proxy) whose
  ``eth0`` is on the switch as ``10.(200+k).0.(i+2)``, forwarding on, with a route to every other
  node's pod CIDR ``10.(200+k).(i+1).0/24`` via that node (the machine's namespace gets the same
  routes, so answers from the apiserver find the pods).

Nothing is added to the machine's real interfaces; the one veth and its routes go when the fabric is
closed or the namespaces' processes die.
"""

from __future__ import annotations

import contextlib
import ipaddress
import subprocess
import threading
from dataclasses import dataclass, field

from imexdra_sim.localcluster.processes import ClusterStartError, ManagedProcess, Supervisor, wait_until

FIRST_OCTET, SECOND_OCTET_BASE, MAX_FABRICS = 10, 200, 50


def _run(argv: list[str], netns_pid: int | None) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in the network namespace of ``netns_pid`` (the machine's when None)."""
    prefix = ["nsenter", f"--net=/proc/{netns_pid}/ns/net", "--"] if netns_pid else []
    return subprocess.run([*prefix, *argv], capture_output=True, text=True, check=False)


def _checked(argv: list[str], netns_pid: int | None) -> None:
    result = _run(argv, netns_pid)
    if result.returncode != 0:
        raise ClusterStartError(f"{' '.join(argv)} failed: {result.stderr.strip()}")


def _ip(*argv: str, netns_pid: int | None = None) -> None:
    _checked(["ip", *argv], netns_pid)


def _host_addresses() -> set[str]:
    out = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True, check=False).stdout
    return {fields[3].split("/")[0] for line in out.splitlines() if len(fields := line.split()) > 3}


@dataclass
class Fabric:
    """One cluster's switch; ``attach`` puts a node namespace on it."""

    index: int
    switch: ManagedProcess
    nodes: dict[int, int] = field(default_factory=dict)
    """Node index -> the PID whose network namespace is that node."""
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False, compare=False)
    """Nodes start concurrently: one ``attach`` at a time, so each sees every node attached before it
    and no route to a node is missed."""

    @property
    def prefix(self) -> str:
        """``10.(200+k)``: every address of this fabric starts with it."""
        return f"{FIRST_OCTET}.{SECOND_OCTET_BASE + self.index}"

    @property
    def host_ip(self) -> str:
        """The machine's address on the switch: where the apiserver listens."""
        return f"{self.prefix}.0.1"

    @property
    def host_link(self) -> str:
        """The machine-side veth's name."""
        return f"imx{self.index}h"

    @property
    def cluster_cidr(self) -> str:
        """Every node and pod address of this fabric."""
        return f"{self.prefix}.0.0/16"

    def node_ip(self, node: int) -> str:
        """Node ``node``'s address on the switch."""
        return f"{self.prefix}.0.{node + 2}"

    def pod_cidr(self, node: int) -> str:
        """Node ``node``'s pod CIDR."""
        return f"{self.prefix}.{node + 1}.0/24"

    @classmethod
    def create(cls, supervisor: Supervisor) -> Fabric:
        """Pick a free fabric index, start the switch namespace and join the machine to it."""
        used = _host_addresses()
        free = [k for k in range(MAX_FABRICS) if f"{FIRST_OCTET}.{SECOND_OCTET_BASE + k}.0.1" not in used]
        if not free:
            raise ClusterStartError(f"all {MAX_FABRICS} pod fabrics are in use on this machine")
        index = free[0]
        script = "ip link set lo up && ip link add br0 type bridge && ip link set br0 up && exec sleep inf"
        switch = supervisor.start(f"fabric-{index}", ["unshare", "--net", "--", "sh", "-c", script])
        fabric = cls(index=index, switch=switch)
        pid = switch.popen.pid
        wait_until("fabric switch bridge", lambda: _has_link(pid, "br0"), timeout=10, process=switch)
        _ip("link", "add", fabric.host_link, "type", "veth", "peer", "name", "host", "netns", str(pid))
        _ip("link", "set", "host", "master", "br0", "up", netns_pid=pid)
        _ip("addr", "add", f"{fabric.host_ip}/24", "dev", fabric.host_link)
        _ip("link", "set", fabric.host_link, "up")
        return fabric

    def attach(self, node: int, netns_pid: int) -> None:
        """Put the namespace of ``netns_pid`` on the switch as node ``node``, with all pod routes."""
        with self._lock:
            self._attach(node, netns_pid)

    def _attach(self, node: int, netns_pid: int) -> None:
        switch_pid = self.switch.popen.pid
        port = f"imx{self.index}n{node}"
        _ip("link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", str(netns_pid))
        _ip("link", "set", port, "netns", str(switch_pid))
        _ip("link", "set", port, "master", "br0", "up", netns_pid=switch_pid)
        _ip("addr", "add", f"{self.node_ip(node)}/24", "dev", "eth0", netns_pid=netns_pid)
        _ip("link", "set", "eth0", "up", netns_pid=netns_pid)
        _sysctl(netns_pid, "net.ipv4.ip_forward=1")
        for other, other_pid in self.nodes.items():
            _ip("route", "add", self.pod_cidr(other), "via", self.node_ip(other), netns_pid=netns_pid)
            _ip("route", "add", self.pod_cidr(node), "via", self.node_ip(node), netns_pid=other_pid)
        _ip("route", "add", self.pod_cidr(node), "via", self.node_ip(node))
        self.nodes[node] = netns_pid

    def close(self) -> None:
        """Remove the machine-side veth (its routes go with it); the switch dies with its process."""
        with contextlib.suppress(ClusterStartError):
            _ip("link", "del", self.host_link)

    def contains(self, address: str) -> bool:
        """Whether ``address`` belongs to this fabric."""
        return ipaddress.ip_address(address) in ipaddress.ip_network(self.cluster_cidr)


def _has_link(pid: int, name: str) -> bool:
    return _run(["ip", "link", "show", name], pid).returncode == 0


def _sysctl(pid: int, setting: str) -> None:
    # /proc/sys/net is per network namespace: this sets the node's, never the machine's.
    _checked(["sysctl", "-q", "-w", setting], pid)
