"""The managed hosts-file block: what is kept, dropped, ordered, and how the file is written."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from imexdra.daemon.hostsfile import HEADER, managed_mappings, render_hosts, update_hosts_file

USER_LINES = "127.0.0.1\tlocalhost\n# a comment\n10.0.0.5\tmy-pod\n"
#: A name in upstream's shape since #1448 (64f89983: the hash of the UID in test_imexconfig).
NAME0 = "compute-domain-daemon-64f89983-0000"


def test_block_is_sorted_and_user_lines_kept() -> None:
    """User lines stay verbatim; our block follows them sorted by name."""
    text = render_hosts(
        USER_LINES,
        {
            "compute-domain-daemon-64f89983-0001": "10.0.0.2",
            "compute-domain-daemon-64f89983-0000": "10.0.0.1",
        },
    )
    assert text == (
        f"{USER_LINES}\n{HEADER}\n10.0.0.1\tcompute-domain-daemon-64f89983-0000\n10.0.0.2\tcompute-domain-daemon-64f89983-0001\n"
    )


def test_rewrite_replaces_block_without_accumulating_headers() -> None:
    """Rewriting drops every old line mentioning our names (even user ones) and keeps one header."""
    first = render_hosts(
        USER_LINES + "1.1.1.1 compute-domain-daemon-64f89983-0009 # stale\n",
        {"compute-domain-daemon-64f89983-0000": "10.0.0.1"},
    )
    second = render_hosts(first, {"compute-domain-daemon-64f89983-0003": "10.0.0.4"})
    assert second.count(HEADER) == 1
    assert managed_mappings(second) == {"compute-domain-daemon-64f89983-0003": "10.0.0.4"}
    assert second.startswith(USER_LINES)
    assert render_hosts(second, {"compute-domain-daemon-64f89983-0003": "10.0.0.4"}) == second


def test_old_shape_lines_of_an_upgraded_pod_are_dropped() -> None:
    """Lines of the names before #1448 (``compute-domain-daemon-NNNN``) go; only the new block remains."""
    old_block = "10.0.0.1\tcompute-domain-daemon-0000\n10.0.0.2\tcompute-domain-daemon-0001\n"
    old = f"{USER_LINES}\n{HEADER}\n{old_block}"
    text = render_hosts(old, {NAME0: "10.0.0.1"})
    assert text == f"{USER_LINES}\n{HEADER}\n10.0.0.1\t{NAME0}\n"
    assert managed_mappings(text) == {NAME0: "10.0.0.1"}


def test_empty_mapping_removes_block() -> None:
    """With no members the block disappears and the user's file is back as it was."""
    with_block = render_hosts(USER_LINES, {"compute-domain-daemon-64f89983-0000": "10.0.0.1"})
    assert render_hosts(with_block, {}) == USER_LINES


def test_update_writes_in_place_and_only_on_change(tmp_path: Path) -> None:
    """The file keeps its inode (a bind-mounted file cannot be renamed over) and is untouched when equal."""
    hosts = tmp_path / "hosts"
    hosts.write_text(USER_LINES)
    inode = hosts.stat().st_ino
    mapping = {"compute-domain-daemon-64f89983-0000": "10.0.0.1"}
    assert update_hosts_file(hosts, mapping) is True
    assert hosts.stat().st_ino == inode
    assert managed_mappings(hosts.read_text()) == mapping
    mtime = hosts.stat().st_mtime_ns
    assert update_hosts_file(hosts, mapping) is False
    assert hosts.stat().st_mtime_ns == mtime


@pytest.mark.parametrize("grows", [True, False], ids=["longer", "shorter"])
def test_a_reader_during_a_rewrite_sees_the_old_or_the_new_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, grows: bool
) -> None:
    """nvidia-imex may re-read the file mid-rewrite (SIGUSR1): it never finds it empty or cut short.

    Every write and truncation the rewrite makes is preceded by a read of the file, as a reader could
    make at that moment; each such read must hold the old or the new mapping in full.
    """
    hosts = tmp_path / "hosts"
    full = {f"compute-domain-daemon-64f89983-{i:04d}": f"10.0.0.{i + 1}" for i in range(18)}
    few = {name: f"10.1.0.{i}" for i, name in enumerate(list(full)[-3:])}  # not a prefix of ``full``'s
    old, new = (few, full) if grows else (full, few)
    hosts.write_text(render_hosts(USER_LINES, old))
    seen: list[dict[str, str]] = []

    def reading_first(real: Any) -> Any:
        def call(*args: Any) -> Any:
            seen.append(managed_mappings(hosts.read_text()))
            return real(*args)

        return call

    for name in ("write", "pwrite", "ftruncate", "truncate"):
        monkeypatch.setattr(os, name, reading_first(getattr(os, name)))
    assert update_hosts_file(hosts, new) is True
    monkeypatch.undo()
    assert seen
    assert all(mapping in (old, new) for mapping in seen), seen
    assert managed_mappings(hosts.read_text()) == new
    assert hosts.read_text().startswith(USER_LINES)


def test_update_creates_missing_file(tmp_path: Path) -> None:
    """A missing hosts file is created with mode 0644."""
    hosts = tmp_path / "hosts"
    assert update_hosts_file(hosts, {"compute-domain-daemon-64f89983-0002": "fd00::2"}) is True
    assert hosts.read_text() == f"{HEADER}\nfd00::2\tcompute-domain-daemon-64f89983-0002\n"
    assert hosts.stat().st_mode & 0o777 == 0o644


def test_update_refuses_a_symbolic_link(tmp_path: Path) -> None:
    """A link at the hosts file's path is neither written through nor re-moded: a clear error instead."""
    target = tmp_path / "elsewhere"
    target.write_text(USER_LINES)
    target.chmod(0o600)
    hosts = tmp_path / "hosts"
    hosts.symlink_to(target)
    with pytest.raises(OSError, match="hosts file is a symbolic link; refusing to follow it"):
        update_hosts_file(hosts, {"compute-domain-daemon-64f89983-0000": "10.0.0.1"})
    assert target.read_text() == USER_LINES
    assert target.stat().st_mode & 0o777 == 0o600
