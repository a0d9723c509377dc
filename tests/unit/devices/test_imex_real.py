"""SubprocessImex against small stand-in executables: start, signal, stop, crash, output, query, orphan
safety."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from imexdra.devices.imex import ImexError
from imexdra.devices.imex_real import SubprocessImex
from tests.support.waiting import eventually, wait_until


def script(path: Path, body: str) -> str:
    """Write an executable shell script and return its path."""
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def imex_script(tmp_path: Path) -> str:
    """An "nvidia-imex" that logs its arguments and each SIGUSR1, and exits 0 on SIGTERM.

    The traps come before the arguments line, which the tests wait for before signalling: logged
    first, a SIGUSR1 could land before its trap and end the shell (sh's default for it), which a
    loaded machine made happen."""
    log = tmp_path / "log"
    return script(
        tmp_path / "nvidia-imex",
        f'trap \'echo usr1 >> {log}\' USR1\ntrap "exit 0" TERM\necho "args $*" >> {log}\n'
        "while true; do sleep 0.05; done",
    )


async def _wait_for_line(path: Path, line: str) -> None:
    def logged() -> bool:
        return path.exists() and line in path.read_text().splitlines()

    await eventually(f"{line!r} in {path}", logged, within=10, interval=0.05)


async def test_start_signal_stop(tmp_path: Path, imex_script: str) -> None:
    """The child gets ``-c <config>``, receives SIGUSR1, and a stop is a clean SIGTERM exit."""
    config = tmp_path / "imexd.cfg"
    imex = SubprocessImex(config, imex_binary=imex_script)
    pid = await imex.start()
    assert imex.pid == pid
    await _wait_for_line(tmp_path / "log", f"args -c {config}")
    with pytest.raises(ImexError, match="already running"):
        await imex.start()
    imex.signal(signal.SIGUSR1)
    await _wait_for_line(tmp_path / "log", "usr1")
    assert await imex.stop(grace=5) == 0
    assert imex.pid is None
    with pytest.raises(ImexError, match="not running"):
        imex.signal(signal.SIGUSR1)


async def test_wait_reports_a_crash(tmp_path: Path) -> None:
    """An exit on its own is seen by wait() with its code; a restart is then possible."""
    imex = SubprocessImex(tmp_path / "c", imex_binary=script(tmp_path / "crash", "exit 7"))
    await imex.start()
    assert await imex.wait() == 7
    assert imex.pid is None
    await imex.start()
    assert await imex.wait() == 7


async def test_output_is_copied_and_its_tail_kept(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """IMEX's lines reach our stdout and stderr unchanged, and its last lines stay readable after it
    exits (a line longer than a read, too); the next start begins a new tail."""
    long_line = "x" * 100_000
    body = f"echo starting\necho 'failed: NV_ERR_IN_USE' >&2\necho {long_line}\nexit 1"
    imex = SubprocessImex(tmp_path / "c", imex_binary=script(tmp_path / "talk", body))
    await imex.start()
    assert await imex.wait() == 1
    tail = imex.output_tail
    assert {"starting", "failed: NV_ERR_IN_USE"} <= set(tail)
    assert "".join(line for line in tail if line.startswith("x")) == long_line  # kept in 64 KiB pieces
    out, err = capfd.readouterr()
    assert out == f"starting\n{long_line}\n"
    assert err == "failed: NV_ERR_IN_USE\n"
    imex.imex_binary = script(tmp_path / "quiet", "exit 0")
    await imex.start()
    assert await imex.wait() == 0
    assert imex.output_tail == ()


async def test_stop_escalates_to_sigkill(tmp_path: Path) -> None:
    """A child ignoring SIGTERM is killed once the grace period is over."""
    stubborn = script(tmp_path / "stubborn", "trap '' TERM\nwhile true; do sleep 0.05; done")
    imex = SubprocessImex(tmp_path / "c", imex_binary=stubborn)
    pid = await imex.start()
    await eventually("the shell ignoring SIGTERM", lambda: ignores_sigterm(pid), within=10, interval=0.01)
    assert await imex.stop(grace=0.5) == -signal.SIGKILL


def ignores_sigterm(pid: int) -> bool:
    """Tell whether ``pid`` has SIGTERM ignored (its ``SigIgn`` mask in /proc)."""
    status = Path(f"/proc/{pid}/status").read_text()
    ignored = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:")), 16)
    return bool(ignored & (1 << (signal.SIGTERM - 1)))


def alive(pid: int) -> bool:
    """Tell whether ``pid`` exists (a zombie still does, until it is reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_start_failure_is_an_imex_error(tmp_path: Path) -> None:
    """A missing executable is reported as ImexError naming it."""
    imex = SubprocessImex(tmp_path / "c", imex_binary=str(tmp_path / "absent"))
    with pytest.raises(ImexError, match="absent"):
        await imex.start()
    assert await imex.stop(grace=1) is None


@pytest.mark.parametrize(
    ("body", "code", "output", "ready"),
    [
        ('[ "$1 $2 $3" = "-c CONFIG -q" ] && echo READY', 0, "READY\n", True),
        ("echo NOT_READY; exit 0", 0, "NOT_READY\n", False),
        ("echo oops >&2; exit 3", 3, "oops\n", False),
    ],
    ids=["ready", "not-ready", "stderr-and-exit-code"],
)
async def test_query_runs_ctl(tmp_path: Path, body: str, code: int, output: str, ready: bool) -> None:
    """``query`` runs ``<ctl> -c <config> -q`` and returns exit code and stdout+stderr."""
    config = tmp_path / "imexd.cfg"
    ctl = script(tmp_path / "ctl", body.replace("CONFIG", str(config)))
    result = await SubprocessImex(config, ctl_binary=ctl).query()
    assert (result.returncode, result.output, result.ready) == (code, output, ready)


async def test_query_failures(tmp_path: Path) -> None:
    """A missing or hanging ctl is an ImexError."""
    with pytest.raises(ImexError, match="absent"):
        await SubprocessImex(tmp_path / "c", ctl_binary=str(tmp_path / "absent")).query()
    hang = script(tmp_path / "hang", "exec sleep 30")
    with pytest.raises(ImexError, match="did not answer"):
        await SubprocessImex(tmp_path / "c", ctl_binary=hang, query_timeout=0.3).query()


def test_child_dies_with_its_parent(tmp_path: Path, imex_script: str) -> None:
    """A supervisor killed outright does not leave IMEX running (parent-death signal)."""
    pid_file = tmp_path / "pid"
    parent_code = (
        "import asyncio, pathlib, sys\n"
        "from imexdra.devices.imex_real import SubprocessImex\n"
        "async def main():\n"
        f"    imex = SubprocessImex(pathlib.Path('c'), imex_binary={imex_script!r})\n"
        f"    pathlib.Path({str(pid_file)!r}).write_text(str(await imex.start()))\n"
        "    await asyncio.sleep(60)\n"  # the parent lives until the test kills it
        "asyncio.run(main())\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", parent_code])
    try:
        wait_until("the IMEX child's PID", lambda: pid_file.exists() and pid_file.read_text(), 10, 0.05)
        child = int(pid_file.read_text())
        assert alive(child)
    finally:
        parent.kill()
        parent.wait()
    try:
        wait_until("the IMEX child to end with its killed parent", lambda: not alive(child), 5, 0.05)
    finally:
        if alive(child):
            os.kill(child, signal.SIGKILL)
