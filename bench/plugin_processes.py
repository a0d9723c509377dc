"""The two kubelet plugins of ``plugin_bench.py`` as host processes on its node, and /proc readings of them.

- ``NodeFiles``: the node's stand-in hardware (``imexdra_sim.devices.driverroot_fake``: the driver root
  with the mock NVML library, the fake ``/proc/devices``) and the CDI root, written once and shared by
  both plugins; ``reset`` empties the plugin directory and CDI root between turns;
- ``our_plugin``/``upstream_plugin``: how each is started (ours from ``runtimevenv``, optionally through
  ``steptiming.py``; upstream's through ``bench/upstream.sh run-plugin`` with its own flags), in either
  IMEX mode: host-managed (``host_socket``: the node's host IMEX command socket) or driver-managed;
  host-managed, upstream's runs in a mount namespace of its own with a root view as its container
  driver root (``ROOT_VIEW``);
- ``tree_*``: CPU and memory summed over a plugin's process tree, every thread: ``utime + stime``
  (includes ended threads, 10 ms ticks), ``schedstat`` time on CPU (nanoseconds, live threads), by
  thread name, and VmRSS/VmHWM.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from benchlib import (
    CLIQUE,
    DRIVER,
    DRIVER_NAMESPACE,
    PLUGIN_BIN,
    ROOT,
    RUNTIME_BIN,
    feature_gates,
    host_imex_socket,
)

from imexdra_sim.devices import driverroot_fake
from imexdra_sim.localcluster.binaries import nvml_mock_library
from imexdra_sim.localcluster.nodes import Node
from imexdra_sim.localcluster.processes import free_port

UPSTREAM_SH = ROOT / "bench" / "upstream.sh"
#: Where upstream is told its CDI hook lives: a path that does not exist (docs/upstream-plugin.md).
CDI_HOOK = "/usr/local/bin/nvidia-cdi-hook"
#: Host-managed, upstream's readiness check is ``chroot <container driver root> nvidia-imex-ctl -q
#: --u=<socket>`` (docs/upstream-plugin.md, "Host-managed"): the root it chroots into must be a whole
#: root file system, as its container's ``/driver-root`` is on a node whose driver is installed on the
#: host. Ours is a directory with the driver's files only, in which the fake ``nvidia-imex-ctl`` (a
#: Python program) finds no interpreter. So, in a mount namespace of upstream's plugin alone, this
#: makes a read-only view of the host's root file system with a copy of the driver root on top (the
#: copy on a tmpfs: overlayfs refuses layers that contain each other) and a ``/dev/null`` as every
#: host has, and binds the host IMEX socket's directory into it (overlayfs does not pass connects to a
#: socket). Upstream gets the view as ``--container-driver-root`` and the real driver root as
#: ``--nvidia-driver-root``, as under its chart, so its CDI specs name host paths. Arguments: driver
#: root, tmpfs mount point, view mount point, socket directory, then the command to run.
ROOT_VIEW = """set -e
driver_root=$1 layer=$2 view=$3 socket_dir=$4
shift 4
mount -t tmpfs -o mode=0755 tmpfs "$layer"
cp -a "$driver_root/." "$layer/"
[ -e "$layer/dev/null" ] || mknod -m 0666 "$layer/dev/null" c 1 3
mount -t overlay overlay -o "ro,lowerdir=$layer:/" "$view"
mount --bind "$socket_dir" "$view$socket_dir"
exec "$@"
"""


#: The ports ``distinct_port`` has handed out in this run.
_HANDED_OUT: set[int] = set()


def distinct_port() -> int:
    """A port free now and not handed out before in this run.

    ``free_port`` alone can give the same port twice (the kernel reuses a port once its probe socket
    closes): with one plugin per node, two plugins started at once were given the same health-check
    port, and the second failed on ``Address already in use``.
    """
    while (port := free_port()) in _HANDED_OUT:
        continue
    _HANDED_OUT.add(port)
    return port


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (children of every thread), as /proc has them now."""
    pids, pending = [], [pid]
    while pending:
        current = pending.pop()
        pids.append(current)
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                pending += [int(child) for child in (task / "children").read_text().split()]
            except OSError:
                continue
    return pids


def tree_cpu_seconds(pid: int) -> float:
    """The utime + stime of every thread of ``pid``'s process tree."""
    total = 0.0
    for member in process_tree(pid):
        fields = Path(f"/proc/{member}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def tree_on_cpu_seconds(pid: int) -> float:
    """Time on CPU of every live thread of ``pid``'s tree (schedstat: nanoseconds, not 10 ms ticks)."""
    total = 0
    for member in process_tree(pid):
        for task in Path(f"/proc/{member}/task").iterdir():
            try:
                total += int((task / "schedstat").read_text().split()[0])
            except OSError:
                continue  # a thread that ended meanwhile
    return total / 1e9


def on_cpu_by_thread(pid: int) -> dict[str, float]:
    """Time on CPU of the tree's live threads, summed by thread name (``comm``), in seconds."""
    by_name: dict[str, float] = {}
    for member in process_tree(pid):
        for task in Path(f"/proc/{member}/task").iterdir():
            try:
                name = (task / "comm").read_text().strip()
                on_cpu = int((task / "schedstat").read_text().split()[0]) / 1e9
            except OSError:
                continue
            by_name[name] = by_name.get(name, 0.0) + on_cpu
    return by_name


def thread_count(pid: int) -> int:
    """Threads of ``pid``'s process tree."""
    return sum(len(list(Path(f"/proc/{member}/task").iterdir())) for member in process_tree(pid))


def tree_rss_mib(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM summed over ``pid``'s process tree, in MiB."""
    sums = {"VmRSS": 0.0, "VmHWM": 0.0}
    for member in process_tree(pid):
        for line in Path(f"/proc/{member}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in sums:
                sums[key] += int(value.split()[0]) / 1024
    return {key: round(value, 1) for key, value in sums.items()}


@dataclass
class Plugin:
    """One plugin implementation as a host process on the node."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    #: Its own /metrics (both serve ``nvidia_dra_request_duration_seconds``, the same name and labels).
    metrics_port: int
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(self.argv, env=self.env, stdout=out, stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        assert self.process is not None
        if self.process.poll() is not None:
            tail = self.log.read_text(errors="replace")[-3000:]
            raise RuntimeError(
                f"{self.name} plugin exited ({self.process.returncode}); its log ends:\n{tail}"
            )
        return self.process.pid

    def own_metrics(self) -> str:
        """Its own /metrics text."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as response:
            return str(response.read().decode())

    def stop(self) -> int:
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self.process = None
        return code


@dataclass(frozen=True)
class NodeFiles:
    """The node's kubelet directories and stand-in hardware, as both plugins are pointed at them."""

    node: Node
    driver_root: Path
    proc_devices: Path
    cdi_root: Path

    @classmethod
    def write(cls, node: Node) -> NodeFiles:
        base = node.host_dir / "imexdra"
        tray = driverroot_fake.Tray(node.name, driverroot_fake.Fabric.parse(CLIQUE))
        hardware = driverroot_fake.write_node_hardware(base, tray, nvml_library=nvml_mock_library())
        return cls(node, hardware.driver_root, hardware.proc_devices, base / "cdi")

    @property
    def base(self) -> Path:
        """Where the hardware files live (``benchlib.HostImex`` serves its socket under it)."""
        return self.driver_root.parent

    @property
    def host_imex_socket(self) -> Path:
        return host_imex_socket(self.base)

    def reset(self) -> None:
        """A fresh node for the next plugin: no plugin directory, an empty CDI root."""
        shutil.rmtree(self.node.plugins_dir / DRIVER, ignore_errors=True)
        shutil.rmtree(self.cdi_root, ignore_errors=True)
        self.cdi_root.mkdir(parents=True)


def our_plugin(
    files: NodeFiles,
    kubeconfig: Path,
    log: Path,
    step_record: Path | None = None,
    host_socket: Path | None = None,
) -> Plugin:
    """Ours, as the image runs it; with ``step_record``, through ``steptiming.py`` (prepare's steps timed).

    Driver-managed by default (no gate, no mode: the binary's defaults); host-managed with ``host_socket``.
    """
    port = distinct_port()
    env = {
        "PATH": os.environ.get("PATH", ""),
        "NODE_NAME": files.node.name,
        "NAMESPACE": DRIVER_NAMESPACE,
        "KUBECONFIG": str(kubeconfig),
        "KUBELET_REGISTRAR_DIRECTORY_PATH": str(files.node.registry_dir),
        "KUBELET_PLUGINS_DIRECTORY_PATH": str(files.node.plugins_dir),
        "CDI_ROOT": str(files.cdi_root),
        "DRIVER_ROOT_CTR_PATH": str(files.driver_root),
        "NVIDIA_DRIVER_ROOT": str(files.driver_root),
        "ALT_PROC_DEVICES_PATH": str(files.proc_devices),
        "HEALTHCHECK_PORT": str(distinct_port()),
        "HTTP_ENDPOINT": f"127.0.0.1:{port}",
        "LOGGING_FORMAT": "json",
    }
    if host_socket is not None:
        env["FEATURE_GATES"] = feature_gates(host_managed=True)
        env["IMEX_MODE"] = "hostManaged"
        env["IMEX_HOST_SOCKET_PATH"] = str(host_socket)
    argv = [str(PLUGIN_BIN)]
    if step_record is not None:
        argv = [str(RUNTIME_BIN / "python"), str(Path(__file__).with_name("steptiming.py")), str(step_record)]
    return Plugin("imexdra", argv, env, log, port)


def upstream_plugin(
    files: NodeFiles, kubeconfig: Path, checkout: Path, log: Path, host_socket: Path | None = None
) -> Plugin:
    """Upstream's, built from ``checkout`` (``bench/upstream.sh``), with its own flags for the node.

    Driver-managed by default; host-managed with ``host_socket``: its gate and mode, and ``ROOT_VIEW``.
    """
    port = distinct_port()
    container_root, wrapper, host_managed = files.driver_root, list[str](), list[str]()
    if host_socket is not None:
        container_root = files.node.host_dir / "upstream-root"
        layer = files.node.host_dir / "upstream-root-layer"
        for mount_point in (container_root, layer):
            mount_point.mkdir(exist_ok=True)
        wrapper = ["unshare", "--mount", "--propagation", "private", "sh", "-c", ROOT_VIEW, "sh"]
        wrapper += [str(files.driver_root), str(layer), str(container_root), str(host_socket.parent)]
        host_managed = [
            "--feature-gates=HostManagedIMEXDaemon=true",
            "--imex-mode=hostManaged",
            f"--imex-host-socket-path={host_socket}",
        ]
    argv = [
        *wrapper,
        str(UPSTREAM_SH),
        "run-plugin",
        str(checkout),
        f"--kubeconfig={kubeconfig}",
        f"--node-name={files.node.name}",
        f"--namespace={DRIVER_NAMESPACE}",
        f"--nvidia-driver-root={files.driver_root}",
        f"--container-driver-root={container_root}",
        f"--cdi-root={files.cdi_root}",
        f"--kubelet-plugins-directory-path={files.node.plugins_dir}",
        f"--kubelet-registrar-directory-path={files.node.registry_dir}",
        f"--nvidia-cdi-hook-path={CDI_HOOK}",
        f"--http-endpoint=127.0.0.1:{port}",
        f"--healthcheck-port={distinct_port()}",
        *host_managed,
    ]
    env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/root")}
    env["ALT_PROC_DEVICES_PATH"] = str(files.proc_devices)
    return Plugin("upstream", argv, env, log, port)
