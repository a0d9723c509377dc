"""Kernel limits of the machine that a cluster of many nodes on one machine outgrows.

Every node's kubelet (its cAdvisor, its certificate and config watchers) and containerd hold inotify
instances, and the limit is per user: all nodes run as root on this machine, so together they share
``fs.inotify.max_user_instances`` (128 by default). A kubelet that finds none left fails at start
("Failed to start cAdvisor: inotify_init: too many open files"); past about 16 containerd nodes, the
default is gone. kind documents the same limit for its node containers and has its users raise it; the
harness raises it itself, only ever upwards, and says so (docs/node-runtime.md §3).
"""

from __future__ import annotations

import logging
from pathlib import Path

from imexdra_sim.localcluster.processes import ClusterStartError

_log = logging.getLogger(__name__)
INOTIFY_INSTANCES = Path("/proc/sys/fs/inotify/max_user_instances")
#: What one node's processes may hold (measured: about 7 per containerd node), with room to spare;
#: the base is the default the rest of the machine had.
INSTANCES_PER_NODE = 32
_BASE = 128


def ensure_inotify_instances(nodes: int, *, limit_file: Path = INOTIFY_INSTANCES) -> None:
    """Raise the inotify instance limit to what ``nodes`` nodes need, if it is lower."""
    needed = _BASE + INSTANCES_PER_NODE * nodes
    current = int(limit_file.read_text())
    if current >= needed:
        return
    try:
        limit_file.write_text(f"{needed}\n")
    except OSError as error:
        raise ClusterStartError(
            f"{nodes} nodes need fs.inotify.max_user_instances >= {needed} (it is {current}) and it "
            f"cannot be raised here ({error.strerror or error}); run: sysctl -w "
            f"fs.inotify.max_user_instances={needed}"
        ) from error
    _log.warning("raised fs.inotify.max_user_instances from %d to %d for %d nodes", current, needed, nodes)
