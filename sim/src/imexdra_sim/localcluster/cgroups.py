"""A containerd node's cgroups: a subtree of the machine's that its processes see as the whole machine.

On a real node the kubelet's cAdvisor watches every cgroup of its machine, and runc makes each
container's cgroup on that machine. Simulated nodes share one machine, so without this every node's
cAdvisor would watch every other node's containers too (its housekeeping grows with the square of the
rack), and cgroups of containers whose shims were killed at ``LocalCluster.stop`` stay behind on the
machine for every later cluster to watch. Here each containerd node gets the subtree
``<ours>/imexdra/<run>/<node>`` in every cgroup hierarchy; its containerd, kubelet and kube-proxy are
moved into it before they start, and the node's namespace setup enters a new cgroup namespace there
and mounts the hierarchies afresh, as a container runtime does for a container (docs/node-runtime.md
§9). Stopping the cluster removes the run's subtree; subtrees of runs that died without stopping are
removed by the next cluster that starts.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shlex
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from imexdra_sim.localcluster.processes import ClusterStartError

CGROUP_ROOT = Path("/sys/fs/cgroup")
TOP = "imexdra"
"""The directory under our own cgroup, in every hierarchy, holding one subtree per cluster run."""
STALE_AFTER = 120.0
"""A run's subtree this old with no process in it is a leftover: nodes move in within seconds."""
_CPUSET_FILES = ("cpuset.cpus", "cpuset.mems")
_CREATING = threading.Lock()
"""Nodes start concurrently and share their run's directories, whose cpuset files must be filled first."""


@dataclass(frozen=True, slots=True)
class Hierarchy:
    """One mounted cgroup hierarchy and where this process sits in it."""

    mount_point: Path
    fstype: str
    """``cgroup`` (v1) or ``cgroup2``."""
    options: str
    """What ``mount -o`` needs to mount the same hierarchy again (its controllers, or ``name=``)."""
    own: Path
    """This process's cgroup directory in it."""


def _v1_options(super_options: str) -> str:
    """The controllers (and ``name=``) of a v1 mount's super options, without the generic ones."""
    generic = {"rw", "ro", "relatime", "noatime", "nosuid", "nodev", "noexec"}
    kept = [o for o in super_options.split(",") if o not in generic and not o.startswith("release_agent=")]
    if any(o.startswith("name=") for o in kept) and not any(o == "none" for o in kept):
        kept.insert(0, "none")
    return ",".join(kept)


def parse_hierarchies(mountinfo: str, proc_cgroup: str) -> list[Hierarchy]:
    """The cgroup hierarchies of ``/proc/self/mountinfo`` text, placed by ``/proc/self/cgroup`` text."""
    membership: dict[str, str] = {}
    for line in proc_cgroup.splitlines():
        _, controllers, path = line.split(":", 2)
        membership[controllers] = path
    found: list[Hierarchy] = []
    for line in mountinfo.splitlines():
        before, _, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        root, mount_point, fstype, super_options = fields[3], Path(fields[4]), tail[0], tail[2]
        options = "" if fstype == "cgroup2" else _v1_options(super_options)
        # /proc/self/cgroup names a v1 hierarchy by its controllers and name= (no flags such as
        # xattr), and the v2 one by nothing.
        mounted = set(options.split(","))
        if fstype == "cgroup2":
            keys: list[str] = [k for k in membership if not k]
        else:
            keys = [k for k in membership if k and set(k.split(",")) <= mounted]
        if not keys:
            continue
        relative = os.path.relpath(membership[keys[0]], root)
        own = mount_point if relative == "." else mount_point / relative
        found.append(Hierarchy(mount_point, fstype, options, own))
    return found


def machine_hierarchies() -> list[Hierarchy]:
    """The machine's hierarchies as this process sees them."""
    return parse_hierarchies(Path("/proc/self/mountinfo").read_text(), Path("/proc/self/cgroup").read_text())


def _mkdir(path: Path, hierarchy: Hierarchy) -> None:
    """Make ``path`` (and its parents); cpuset children start empty in v1 and get their parent's sets."""
    if path.exists():
        return
    _mkdir(path.parent, hierarchy)
    try:
        path.mkdir()
    except FileExistsError:
        return  # another cluster's start made it meanwhile, and fills it
    if hierarchy.fstype == "cgroup" and "cpuset" in hierarchy.options.split(","):
        for name in _CPUSET_FILES:
            (path / name).write_text((path.parent / name).read_text())


def _remove_tree(path: Path) -> bool:
    """Remove ``path`` and every cgroup below it, deepest first; False if one still holds a process."""
    if not path.is_dir():
        return True
    removed = all([_remove_tree(child) for child in path.iterdir() if child.is_dir()])
    try:
        path.rmdir()
    except OSError as error:
        if error.errno == errno.ENOENT:
            return True
        if error.errno in (errno.EBUSY, errno.ENOTEMPTY):
            return False
        raise
    return removed


@dataclass(frozen=True, slots=True)
class NodeCgroup:
    """One node's subtree, ``imexdra/<run>/<node>`` under this process's cgroup in every hierarchy."""

    relative: Path
    hierarchies: tuple[Hierarchy, ...]

    def paths(self) -> list[Path]:
        """The node's directory in each hierarchy."""
        return [h.own / self.relative for h in self.hierarchies]

    def create(self) -> None:
        """Make the node's directories (idempotent)."""
        with _CREATING:
            for hierarchy, path in zip(self.hierarchies, self.paths(), strict=True):
                try:
                    _mkdir(path, hierarchy)
                except OSError as error:
                    raise ClusterStartError(f"cannot make the node's cgroup {path}: {error}") from error

    def enter_argv(self) -> list[str]:
        """Argv prefix: move this process into the node's cgroups, then exec the rest of the argv."""
        moves = " ".join(shlex.quote(str(path / "cgroup.procs")) for path in self.paths())
        script = f'for procs in {moves}; do echo $$ > "$procs"; done; exec "$@"'
        return ["sh", "-c", script, "enter-node-cgroup"]

    def mount_commands(self) -> list[str]:
        """Shell lines, run inside the node's new cgroup and mount namespaces: mount the hierarchies again.

        Mounted from inside the cgroup namespace, each shows the node's subtree as its root.
        """
        lines: list[str] = []
        v1 = [h for h in self.hierarchies if h.fstype == "cgroup"]
        if v1 or any(h.mount_point != CGROUP_ROOT for h in self.hierarchies):
            lines.append(f"mount -t tmpfs -o mode=755 cgroup {CGROUP_ROOT}")
        for hierarchy in self.hierarchies:
            point = shlex.quote(str(hierarchy.mount_point))
            options = f" -o {hierarchy.options}" if hierarchy.options else ""
            if hierarchy.mount_point != CGROUP_ROOT:
                lines.append(f"mkdir -p {point}")
            lines.append(f"mount -t {hierarchy.fstype}{options} cgroup {point}")
        return lines

    def remove_run(self, timeout: float = 10.0) -> bool:
        """Remove the whole run's subtree once its processes are gone; False if some stayed ``timeout``."""
        return _remove_run_trees([h.own / self.relative.parent for h in self.hierarchies], timeout)


def _remove_run_trees(trees: Iterable[Path], timeout: float) -> bool:
    """Remove each tree, retrying while the kernel still tears down exited processes."""
    pending = list(trees)
    deadline = time.monotonic() + timeout
    while True:
        pending = [tree for tree in pending if not _remove_tree(tree)]
        if not pending or time.monotonic() >= deadline:
            return not pending
        time.sleep(0.1)


def node_cgroup(run: str, node: str) -> NodeCgroup:
    """The subtree for ``node`` of the cluster run ``run`` (not created yet)."""
    return NodeCgroup(Path(TOP) / run / node, tuple(machine_hierarchies()))


def holds_process(tree: Path) -> bool:
    """Whether ``tree`` or any cgroup below it has a process in it (a run that is still going)."""
    for directory, _, files in os.walk(tree):
        if "cgroup.procs" in files:
            with contextlib.suppress(OSError):  # removed meanwhile
                if (Path(directory) / "cgroup.procs").read_text().strip():
                    return True
    return False


def remove_stale_runs(current_run: str, *, now: float | None = None) -> list[Path]:
    """Remove subtrees of other runs that are old and hold no process (runs that died without stopping).

    Returns what was removed. A subtree with a process anywhere in it is a cluster still running (in
    another test lane, say, docs/testing.md) and is left whole whatever its age: removing its empty
    cgroups would take the one its kubelet just made for a pod before runc moves the pod's first
    process in.
    """
    now = time.time() if now is None else now
    removed: list[Path] = []
    for hierarchy in machine_hierarchies():
        top = hierarchy.own / TOP
        if not top.is_dir():
            continue
        for run in top.iterdir():
            with contextlib.suppress(OSError):
                stale = run.name != current_run and run.is_dir() and now - run.stat().st_mtime > STALE_AFTER
                if stale and not holds_process(run) and _remove_tree(run):
                    removed.append(run)
    return removed
