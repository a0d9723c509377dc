"""A simulated node's real container runtime: containerd 2.x with runc, CDI and a CNI bridge.

Each containerd node (``NodeSpec.runtime == "containerd"``) gets its own containerd (own root, state,
socket), started in a mount namespace and a network namespace of its own (docs/node-runtime.md):

* the mount namespace is the node's host view: ``/var/lib/kubelet`` is the node's kubelet root, each
  CDI spec dir (``/var/run/cdi``) is the node's copy, and ``/run/containerd`` and ``/var/run/netns``
  are private, so nothing of one node lands in another's or on the machine. The kubelet joins it.
* the network namespace holds the node's pod bridge (``cni0``, CNI bridge + host-local IPAM over the
  node's pod CIDR): pod traffic never touches the machine's interfaces. The kubelet stays in the
  machine's namespace, where the apiserver listens, and talks to containerd over its unix socket.

The archives tools/image/build.sh wrote are in the node's ``k8s.io`` namespace before containerd
starts, so the kubelet finds them present: they were imported once into a seed root, which the node's
root is a copy of (``localcluster.imagestore``). Nothing outside the fabric can be reached, so the
third-party images (pause, CoreDNS, the workloads' stand-ins) always come so, as from a node's disk.
The project's image does too, unless the cluster runs a registry (``localcluster.registry``): then it
is left out and the node pulls it from there, as an operator's nodes do.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import signal
from pathlib import Path

from imexdra_sim.localcluster.binaries import Binaries, cache_root
from imexdra_sim.localcluster.cgroups import NodeCgroup
from imexdra_sim.localcluster.imagestore import populate_root
from imexdra_sim.localcluster.machine import mount_commands
from imexdra_sim.localcluster.processes import (
    ClusterStartError,
    ManagedProcess,
    Supervisor,
    children,
    wait_until,
)
from imexdra_sim.localcluster.registry import Registry, hosts_toml

PAUSE_IMAGE = "registry.k8s.io/pause:3.10.2"
"""The kubelet's sandbox image; tools/image/build.sh builds it (PAUSE_VERSION in versions.env)."""
CNI_NETWORK = "imexdra-pods"


def images_dir() -> Path:
    """Where tools/image/build.sh leaves the image archives."""
    return cache_root() / "images"


PROJECT_IMAGE_ARCHIVE = "imexdra.tar"
"""The project's image index (tools/image/build.sh): what a release pushes to a registry."""


def image_archives(*, pulled: bool = False) -> list[Path]:
    """Every image archive to import into a node, or explain how to build them.

    ``pulled``: the node pulls the project's image from the cluster's registry; leave it out.
    """
    archives = sorted(images_dir().glob("*.tar"))
    missing = {"pause.tar", "coredns.tar"} - {a.name for a in archives}
    if missing:
        raise ClusterStartError(f"no {', '.join(sorted(missing))} in {images_dir()}; run `make k8s` first")
    return [a for a in archives if not (pulled and a.name == PROJECT_IMAGE_ARCHIVE)]


def config_toml(directory: Path, binaries: Binaries) -> str:
    """A node's containerd config (version 3): private root/state/socket, runc on cgroupfs, CDI on.

    Registries are configured per host under ``<directory>/certs.d`` (``hosts.toml``, as on a real
    node's ``/etc/containerd/certs.d``).
    """
    runtime = "plugins.'io.containerd.cri.v1.runtime'"
    return f"""version = 3
root = "{directory / "root"}"
state = "{directory / "state"}"

[grpc]
  address = "{directory / "containerd.sock"}"

[{runtime}]
  # This machine withholds CAP_SYS_RESOURCE, so no process may lower an OOM score below its own; the
  # kubelet asks -998 for sandboxes. containerd's rootless setting clamps to its own score instead.
  restrict_oom_score_adj = true
  enable_cdi = true
  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]
  [{runtime}.containerd]
    default_runtime_name = "runc"
    [{runtime}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{runtime}.containerd.runtimes.runc.options]
        BinaryName = "{binaries.path("runc")}"
        SystemdCgroup = false
  [{runtime}.cni]
    bin_dirs = ["{binaries.bin_dir}"]
    conf_dir = "{directory / "net.d"}"

# NRI's socket defaults to the host-wide /var/run/nri/nri.sock; nodes starting together on one machine
# each unlink and bind it, and the loser exits ("bind: address already in use"). One per node.
[plugins.'io.containerd.nri.v1.nri']
  socket_path = "{directory / "nri.sock"}"

[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = "{directory / "certs.d"}"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{PAUSE_IMAGE}"
"""


def cni_conflist(pod_cidr: str, ipam_dir: Path) -> dict[str, object]:
    """A bridge network over the node's pod CIDR, gateway on the bridge, IPAM state kept per node."""
    network = ipaddress.ip_network(pod_cidr)
    if network.is_loopback:
        raise ClusterStartError(f"a containerd node needs a routable pod CIDR, not loopback {pod_cidr}")
    return {
        "cniVersion": "1.0.0",
        "name": CNI_NETWORK,
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": False,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(ipam_dir),
                    "ranges": [[{"subnet": str(network)}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            }
        ],
    }


def _namespace_setup(
    kubelet_root: Path, binds: dict[str, Path], machine: dict[str, Path], cgroup: NodeCgroup
) -> list[str]:
    """Argv prefix: into the node's cgroup, new cgroup/mount/network namespaces as its host, exec the rest.

    ``machine``: bind mounts of the node's CPU and memory view (``localcluster.machine``; may be empty).
    """
    lines = [
        "set -e",
        *cgroup.mount_commands(),
        "ip link set lo up",
        'mkdir -p /var/lib/kubelet && mount --bind "$0" /var/lib/kubelet',
        "mkdir -p /run/containerd /var/run/netns",
        "mount -t tmpfs tmpfs /run/containerd",
        "mount -t tmpfs tmpfs /var/run/netns",
    ]
    for target, source in binds.items():
        lines.append(f"mkdir -p {target} && mount --bind {source} {target}")
    lines.extend(mount_commands(machine))
    # As on a real (systemd) node, mounts are shared: pods that mount host paths with propagation
    # (the kubelet plugin's driver root and plugin dirs) need a shared or slave source. The peer groups
    # are new ones of this namespace: nothing propagates back to the machine.
    lines.append("mount --make-rshared /")
    lines.append('exec "$@"')
    script = "\n".join(lines)
    unshare = ["unshare", "--cgroup", "--mount", "--net", "--propagation", "private", "--"]
    return [*cgroup.enter_argv(), *unshare, "sh", "-c", script, str(kubelet_root)]


def start_containerd(
    directory: Path,
    *,
    name: str,
    kubelet_root: Path,
    pod_cidr: str,
    binds: dict[str, Path],
    machine: dict[str, Path],
    cgroup: NodeCgroup,
    binaries: Binaries,
    supervisor: Supervisor,
    registry: Registry | None = None,
) -> ManagedProcess:
    """Give the node's containerd the images, start it in its namespaces, return the process.

    ``binds`` maps host paths (as the node's components name them, e.g. ``/var/run/cdi``) to the
    node's own directories; ``machine`` binds the node's CPU and memory view over the kernel's;
    ``cgroup`` is the node's subtree (created here). The kubelet must join the returned process's
    cgroup and mount namespaces. With ``registry`` the node pulls the project's image from it.
    """
    archives = image_archives(pulled=registry is not None)
    directory.mkdir(parents=True, exist_ok=True)
    if registry is not None:
        hosts = directory / "certs.d" / registry.host / "hosts.toml"
        hosts.parent.mkdir(parents=True, exist_ok=True)
        hosts.write_text(hosts_toml(registry))
    (directory / "net.d").mkdir(exist_ok=True)
    (directory / "net.d" / "10-imexdra.conflist").write_text(
        json.dumps(cni_conflist(pod_cidr, directory / "ipam"), indent=2)
    )
    populate_root(directory / "root", archives, binaries)
    config = directory / "config.toml"
    config.write_text(config_toml(directory, binaries))
    for source in binds.values():
        source.mkdir(parents=True, exist_ok=True)
    cgroup.create()
    argv = [
        *_namespace_setup(kubelet_root, binds, machine, cgroup),
        str(binaries.path("containerd")),
        f"--config={config}",
    ]
    process = supervisor.start(f"{name}-containerd", argv, env={"PATH": binaries.search_path()})
    socket = directory / "containerd.sock"
    wait_until(f"{name} containerd socket", socket.exists, timeout=30, process=process)
    return process


def shim_pids(socket: Path) -> list[int]:
    """The runc shims of the containerd at ``socket``: in sessions of their own, not its descendants."""
    marker = f"-address\x00{socket}\x00"
    shims: list[int] = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
            if "containerd-shim" in cmdline and marker in cmdline:
                shims.append(int(proc.name))
    return shims


def kill_shims(socket: Path) -> None:
    """SIGKILL the runc shims of the containerd at ``socket`` and the containers they hold.

    Shims run in sessions of their own (they outlive a containerd restart on a real node), so
    stopping containerd's process group leaves them and their containers; killing a container's
    init ends its whole PID namespace.
    """
    for shim in shim_pids(socket):
        for child in children(shim):
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.kill(shim, signal.SIGKILL)
