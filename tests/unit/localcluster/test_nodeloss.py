"""Losing a simulated node as hardware is lost: every process of it at once, nothing left behind.

Runs real process trees (no cluster): ``processes.kill_trees``, ``nodes.power_off`` and
``nodes.forget_processes``, and the shorter node lease a node-loss cluster gives its kubelets.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

from imexdra_sim.localcluster.nodes import NodeSpec, forget_processes, new_node, power_off
from imexdra_sim.localcluster.processes import Supervisor, children, kill_trees, wait_until

#: A root that stays (exec), a child shell that waits, and a grandchild in a session of its own:
#: stopping the root's process group would miss the grandchild, as it misses a node's containers.
TREE = ["sh", "-c", 'sh -c "setsid sleep 60 & wait" & exec sleep 60']


def tree_of(root: int) -> list[int]:
    """The root and every descendant, once all three processes of ``TREE`` exist."""
    found: list[int] = []
    pending = [root]
    while pending:
        pid = pending.pop()
        found.append(pid)
        pending += children(pid)
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def test_kill_trees_kills_descendants_in_other_sessions(tmp_path: Path) -> None:
    """Every process under the root dies by SIGKILL, including one that left the root's session."""
    supervisor = Supervisor(tmp_path)
    root = supervisor.start("tree", TREE)
    try:
        pids = wait_until_tree(root.popen.pid)
        assert len(sessions(pids)) == 2  # the grandchild runs in a session of its own
        killed = kill_trees([root.popen.pid])
        assert sorted(killed) == sorted(pids)
        assert root.popen.wait(timeout=10) == -9
        wait_until("every process of the tree gone", lambda: not any(alive(p) for p in pids), timeout=10)
    finally:
        supervisor.stop_all()


def test_kill_trees_skips_processes_already_gone() -> None:
    """A PID that no longer exists is not an error and is not reported as killed."""
    assert kill_trees([2**22 + 1]) == []


def sessions(pids: list[int]) -> set[int]:
    """The sessions of ``pids`` (a process that has exited counts as none)."""
    found = set()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            found.add(os.getsid(pid))
    return found


def wait_until_tree(root: int) -> list[int]:
    """The three PIDs of ``TREE`` once they all exist and the grandchild has left the session.

    The grandchild is forked in the root's session and calls setsid() only after that: counting the
    processes alone can see it in between (it did, once, on a loaded machine).
    """
    found: list[int] = []

    def complete() -> bool:
        found[:] = tree_of(root)
        return len(found) == 3 and len(sessions(found)) == 2

    wait_until("the process tree", complete, timeout=10)
    return found


def test_power_off_kills_every_node_process_and_restart_forgets_them(tmp_path: Path) -> None:
    """All of a node's processes and their trees die together; then they and the stale socket go."""
    supervisor = Supervisor(tmp_path / "logs")
    node = new_node(NodeSpec(name="n1"), tmp_path)
    node.directory.mkdir()
    node.processes += [supervisor.start("runtime", TREE), supervisor.start("kubelet", ["sleep", "60"])]
    other = supervisor.start("other-node", ["sleep", "60"])
    node.cri_socket.touch()
    try:
        pids = wait_until_tree(node.processes[0].popen.pid)
        killed = power_off(node)
        assert set(pids) | {node.processes[1].popen.pid} == set(killed)
        assert not any(p.alive() for p in node.processes)
        assert other.alive()

        forget_processes(node, supervisor)
        assert node.processes == []
        assert supervisor.processes == [other]
        assert not node.cri_socket.exists()
    finally:
        supervisor.stop_all()


def test_forgetting_a_running_process_is_refused(tmp_path: Path) -> None:
    """Only dead processes are forgotten: a running one would escape teardown."""
    supervisor = Supervisor(tmp_path)
    running = supervisor.start("running", ["sleep", "60"])
    try:
        with pytest.raises(ValueError, match="still running"):
            supervisor.forget(running)
        assert supervisor.processes == [running]
    finally:
        supervisor.stop_all()


@pytest.mark.parametrize(("lease", "expected"), [(None, None), (20, 20)], ids=["default", "short"])
def test_kubelet_lease_follows_the_clusters_grace_period(
    tmp_path: Path, lease: int | None, expected: int | None
) -> None:
    """A node-loss cluster shortens the kubelet's lease; otherwise the kubelet's default stays."""
    node = new_node(NodeSpec(name="n1"), tmp_path)
    assert node.kubelet_config("192.0.2.2", lease_seconds=lease).get("nodeLeaseDurationSeconds") == expected
