"""A program that calls ``stay_init_if_pid1`` as its PID namespace's init reaps orphans and obeys SIGTERM.

Each test runs a small program as PID 1 of a new PID namespace (``unshare --pid --fork``, as root),
which is what a container's first process is.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare(1)"
)

PRELUDE = """
import os, signal, subprocess, sys, time
from imexdra.common.process.init import stay_init_if_pid1
stay_init_if_pid1()
if os.getpid() == 1:
    sys.exit("the program is still PID 1")
"""


def _as_pid1(program: str) -> subprocess.Popen[str]:
    """Start ``program`` (after the prelude) as the init of a new PID namespace."""
    source = PRELUDE + textwrap.dedent(program)
    return subprocess.Popen(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", source],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _namespace_init(unshare: subprocess.Popen[str]) -> int:
    """The host PID of the namespace's PID 1: ``unshare``'s only child."""
    children = Path(f"/proc/{unshare.pid}/task/{unshare.pid}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


def test_an_orphan_is_reaped_and_the_program_exit_code_is_the_containers() -> None:
    """A grandchild whose parent exited (a timed-out probe's nvidia-imex-ctl) leaves no zombie."""
    program = """
        # The shell exits at once; its background sleep is re-parented to PID 1.
        shell = subprocess.run(["sh", "-c", "sleep 0.3 & echo $!"], capture_output=True, text=True)
        orphan = int(shell.stdout)
        deadline = time.monotonic() + 10
        while os.path.exists(f"/proc/{orphan}"):  # a zombie keeps its /proc entry until reaped
            if time.monotonic() > deadline:
                state = open(f"/proc/{orphan}/stat").read().rsplit(")", 1)[1].split()[0]
                sys.exit(f"orphan {orphan} not reaped: state {state}")
            time.sleep(0.05)
        sys.exit(7)
    """
    unshare = _as_pid1(program)
    output, _ = unshare.communicate(timeout=30)
    assert (unshare.returncode, output) == (7, "")


def test_sigterm_from_outside_reaches_a_program_that_does_not_handle_it() -> None:
    """The kubelet's SIGTERM ends the program (PID 1 alone would drop it); the exit code says so."""
    program = """
        print("ready", flush=True)
        signal.pause()
    """
    unshare = _as_pid1(program)
    assert unshare.stdout is not None
    assert unshare.stdout.readline() == "ready\n"
    os.kill(_namespace_init(unshare), signal.SIGTERM)
    output, _ = unshare.communicate(timeout=30)
    assert (unshare.returncode, output) == (128 + signal.SIGTERM, "")


def test_a_signal_the_program_handles_is_forwarded_to_it() -> None:
    """SIGUSR1 to the init arrives in the program, which can then stop cleanly with its own status."""
    program = """
        signal.signal(signal.SIGUSR1, lambda *_: sys.exit(5))
        print("ready", flush=True)
        signal.pause()
    """
    unshare = _as_pid1(program)
    assert unshare.stdout is not None
    assert unshare.stdout.readline() == "ready\n"
    os.kill(_namespace_init(unshare), signal.SIGUSR1)
    output, _ = unshare.communicate(timeout=30)
    assert (unshare.returncode, output) == (5, "")
