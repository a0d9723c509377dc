"""The host IMEX readiness check: the driver root's nvidia-imex-ctl, its command line and its answers.

Covered: where the program is found (the driver root's binary directories only), the exact command
line, ready / not ready / unreachable / silent answers, a missing program and a timeout, each with the
message a user sees; and the simulated node's fake ``nvidia-imex-ctl`` against a fake ``nvidia-imex``
serving the command socket, up and then stopped.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from imexdra.devices.hostimex import CtlHostImex, HostImexNotReadyError, is_ready
from imexdra_sim.devices.fakeimex.install import install_fake_imex

SOCKET = Path("/etc/nvidia-imex/imex_ctrl.sock")


def write_ctl(driver_root: Path, body: str, directory: str = "usr/bin") -> Path:
    """A stand-in ``nvidia-imex-ctl`` (a shell script) in ``directory`` of the driver root."""
    path = driver_root / directory / "nvidia-imex-ctl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


@pytest.mark.parametrize(
    ("code", "output", "ready"),
    [
        (0, "READY\n", True),
        (0, "some warning\nREADY\n", True),
        (0, "  READY  \n", True),
        (0, "NOT_READY\n", False),
        (0, "UNAVAILABLE\n", False),
        (0, "", False),
        (1, "READY\n", False),
        (1, "Unable to connect\n", False),
    ],
    ids=[
        "ready",
        "ready-after-a-warning",
        "ready-padded",
        "not-ready",
        "unavailable",
        "silent",
        "exit-1",
        "unreachable",
    ],
)
def test_what_counts_as_ready(code: int, output: str, ready: bool) -> None:
    """Exit 0 and a line that is exactly READY; NOT_READY (which contains READY) is not ready."""
    assert is_ready(code, output) is ready


async def test_ready_runs_the_driver_roots_ctl_with_upstreams_command_line(tmp_path: Path) -> None:
    """A READY answer passes; the program is run as ``nvidia-imex-ctl -q --u=<socket>``."""
    args = tmp_path / "args"
    write_ctl(tmp_path / "root", f'echo "$@" > {args}\necho READY')
    await CtlHostImex(tmp_path / "root", SOCKET).check()
    assert args.read_text() == f"-q --u={SOCKET}\n"


async def test_ctl_in_a_later_binary_directory_is_found(tmp_path: Path) -> None:
    """The driver root's binary directories are searched in order (here only /sbin has it)."""
    write_ctl(tmp_path / "root", "echo READY", directory="sbin")
    await CtlHostImex(tmp_path / "root", SOCKET).check()


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ("echo NOT_READY", "exited 0 and said 'NOT_READY'"),
        (
            "echo 'Unable to connect to the IMEX daemon' >&2; exit 1",
            "exited 1 and said 'Unable to connect to the IMEX daemon'",
        ),
        ("exit 0", "exited 0 and said nothing"),
    ],
    ids=["not-ready", "unreachable", "silent"],
)
async def test_not_ready_says_where_and_what_ctl_said(tmp_path: Path, body: str, said: str) -> None:
    """Not ready: the message names the socket and quotes nvidia-imex-ctl's exit code and output."""
    write_ctl(tmp_path / "root", body)
    with pytest.raises(HostImexNotReadyError) as caught:
        await CtlHostImex(tmp_path / "root", SOCKET).check()
    message = str(caught.value)
    assert message.startswith(f"host IMEX not ready at {SOCKET}: nvidia-imex-ctl -q {said}")
    assert "nvidia-imex service must be running" in message


async def test_missing_ctl_is_not_ready_and_nothing_is_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No nvidia-imex-ctl in the driver root (even if one is on PATH): not ready, naming the root."""
    root = tmp_path / "root"
    (root / "usr/bin").mkdir(parents=True)
    ran = tmp_path / "ran"
    elsewhere = write_ctl(tmp_path / "path", f"touch {ran}; echo READY")
    monkeypatch.setenv("PATH", f"{elsewhere.parent}:{os.environ['PATH']}")
    # The path is text, not a pattern: tmp_path may hold regex metacharacters (a "+" in --basetemp).
    with pytest.raises(
        HostImexNotReadyError, match=re.escape(f"nvidia-imex-ctl not found under driver root {root}")
    ):
        await CtlHostImex(root, SOCKET).check()
    assert not ran.exists()


async def test_non_executable_ctl_counts_as_missing(tmp_path: Path) -> None:
    """A file that cannot be executed is not the driver's program."""
    write_ctl(tmp_path / "root", "echo READY").chmod(0o644)
    with pytest.raises(HostImexNotReadyError, match="not found under driver root"):
        await CtlHostImex(tmp_path / "root", SOCKET).check()


async def test_ctl_that_does_not_answer_times_out(tmp_path: Path) -> None:
    """A hanging nvidia-imex-ctl is killed after the timeout and reported as not answering."""
    write_ctl(tmp_path / "root", "exec sleep 30")
    with pytest.raises(HostImexNotReadyError, match=r"nvidia-imex-ctl -q did not answer within 0.2s"):
        await CtlHostImex(tmp_path / "root", SOCKET, timeout=0.2).check()


# --- the simulated node's programs ----------------------------------------------------------------------


@pytest.fixture
def host_imex(tmp_path: Path, short_dir: Path) -> Iterator[tuple[Path, subprocess.Popen[bytes]]]:
    """A fake nvidia-imex (one-node domain) serving its command service on a unix socket."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (tmp_path / "nodes.cfg").write_text("127.0.0.1\n")
    sock = short_dir / "imex_ctrl.sock"
    config = tmp_path / "config.cfg"
    config.write_text(
        f"SERVER_PORT={port}\nIMEX_NODE_CONFIG_FILE={tmp_path / 'nodes.cfg'}\nIMEX_CMD_ENABLED=1\n"
        f"IMEX_CMD_UNIX_DOMAIN_PATH={sock}\nLOG_FILE_NAME=\n"
    )
    daemon = subprocess.Popen(
        [sys.executable, "-m", "imexdra_sim.devices.fakeimex.daemon", "-c", str(config)]
    )
    yield sock, daemon
    daemon.terminate()
    daemon.wait(timeout=10)


async def test_fake_ctl_against_fake_host_imex_up_then_down(
    tmp_path: Path, host_imex: tuple[Path, subprocess.Popen[bytes]]
) -> None:
    """A simulated node's nvidia-imex-ctl answers READY while its host IMEX runs, not ready once stopped."""
    sock, daemon = host_imex
    root = tmp_path / "driver-root"
    install_fake_imex(root / "usr/bin")
    check = CtlHostImex(root, sock)
    for _ in range(100):  # the daemon needs a moment to bind; each check takes ~0.1 s
        try:
            await check.check()
            break
        except HostImexNotReadyError:
            continue
    else:
        pytest.fail("fake host IMEX never answered READY")
    daemon.terminate()
    daemon.wait(timeout=10)
    with pytest.raises(
        HostImexNotReadyError, match=f"host IMEX not ready at {sock}: nvidia-imex-ctl -q exited 1"
    ):
        await check.check()
