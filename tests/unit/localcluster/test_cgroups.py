"""Finding the machine's cgroup hierarchies and mounting them again inside a node (localcluster.cgroups)."""

from __future__ import annotations

from pathlib import Path

from imexdra_sim.localcluster.cgroups import NodeCgroup, holds_process, parse_hierarchies

# A cgroup v1 machine with the unified hierarchy beside (systemd's "hybrid" layout), memory nested.
HYBRID_MOUNTINFO = """\
35 30 0:30 / /sys/fs/cgroup ro,nosuid,nodev,noexec - tmpfs tmpfs ro,mode=755
36 35 0:31 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate
37 35 0:32 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime - cgroup cgroup rw,xattr,name=systemd
38 35 0:33 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime - cgroup cgroup rw,cpu,cpuacct
39 35 0:34 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime - cgroup cgroup rw,memory
40 35 0:35 /sandbox /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime - cgroup cgroup rw,pids
"""
HYBRID_CGROUP = """\
12:pids:/sandbox/job
4:memory:/sandbox/job
3:cpu,cpuacct:/
1:name=systemd:/
0::/
"""


def test_hybrid_hierarchies_are_found_with_our_place_in_each() -> None:
    """v1 hierarchies by their controllers (or name=), v2 by its empty key; a mount's own root counts."""
    found = {h.mount_point.name: h for h in parse_hierarchies(HYBRID_MOUNTINFO, HYBRID_CGROUP)}
    assert sorted(found) == ["cpu,cpuacct", "memory", "pids", "systemd", "unified"]
    assert found["cpu,cpuacct"].options == "cpu,cpuacct"
    assert found["systemd"].options == "none,xattr,name=systemd"
    assert found["unified"].fstype == "cgroup2" and found["unified"].options == ""
    assert found["memory"].own == Path("/sys/fs/cgroup/memory/sandbox/job")
    assert found["pids"].own == Path("/sys/fs/cgroup/pids/job")  # that mount's root is /sandbox
    assert found["cpu,cpuacct"].own == Path("/sys/fs/cgroup/cpu,cpuacct")


def test_a_node_mounts_each_hierarchy_again_under_a_fresh_tmpfs() -> None:
    """Inside the node's namespaces: a tmpfs on /sys/fs/cgroup, then every hierarchy with its options."""
    cgroup = NodeCgroup(Path("imexdra/run/n0"), tuple(parse_hierarchies(HYBRID_MOUNTINFO, HYBRID_CGROUP)))
    lines = cgroup.mount_commands()
    assert lines[0] == "mount -t tmpfs -o mode=755 cgroup /sys/fs/cgroup"
    assert "mount -t cgroup -o cpu,cpuacct cgroup /sys/fs/cgroup/cpu,cpuacct" in lines
    assert "mount -t cgroup2 cgroup /sys/fs/cgroup/unified" in lines
    assert Path("/sys/fs/cgroup/memory/sandbox/job/imexdra/run/n0") in cgroup.paths()
    assert cgroup.enter_argv()[-1] == "enter-node-cgroup"


def test_a_cgroup2_only_machine_is_mounted_at_the_root() -> None:
    """With only the unified hierarchy at /sys/fs/cgroup there is no tmpfs: it is mounted there itself."""
    mountinfo = "30 25 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
    [unified] = parse_hierarchies(mountinfo, "0::/user.slice/session\n")
    assert unified.own == Path("/sys/fs/cgroup/user.slice/session")
    assert NodeCgroup(Path("imexdra/r/n"), (unified,)).mount_commands() == [
        "mount -t cgroup2 cgroup /sys/fs/cgroup"
    ]


def test_a_run_with_a_process_deep_in_it_is_still_going(tmp_path: Path) -> None:
    """A run's tree holds a process if any of its cgroups does, however deep; empty ones do not count."""
    run = tmp_path / "imx-run"
    pod = run / "gb200-00" / "kubepods" / "pod1"
    pod.mkdir(parents=True)
    for directory in (run, run / "gb200-00", run / "gb200-00" / "kubepods", pod):
        (directory / "cgroup.procs").write_text("")
    assert not holds_process(run)
    (pod / "cgroup.procs").write_text("4242\n")
    assert holds_process(run)
    assert not holds_process(tmp_path / "gone")
