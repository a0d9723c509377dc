"""One nvidia-imex-ctl query, synchronously: its answer, a program that hangs, one that is missing."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from imexdra.devices.imex import ImexError
from imexdra.devices.imexctl import query_daemon, run_query


def test_answer_is_exit_code_and_both_streams() -> None:
    """stdout and stderr come back as one text, with the exit code."""
    script = "import sys; print('READY'); print('warn', file=sys.stderr); sys.exit(3)"
    result = run_query([sys.executable, "-c", script], 10)
    assert result.returncode == 3
    assert result.output.splitlines() == ["READY", "warn"]


def test_a_hanging_program_is_killed_at_the_deadline() -> None:
    """No answer in time is a TimeoutError, raised only after the program was killed and reaped."""
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=r"did not answer within 0\.3s"):
        run_query(["sleep", "30"], 0.3)
    assert time.monotonic() - started < 10


def test_daemon_query_names_what_failed(tmp_path: Path) -> None:
    """A missing program or a silent daemon is an ImexError that names the program."""
    with pytest.raises(ImexError, match="run /nonexistent/nvidia-imex-ctl"):
        query_daemon("/nonexistent/nvidia-imex-ctl", tmp_path / "imexd.cfg")
    hang = tmp_path / "nvidia-imex-ctl"
    hang.write_text("#!/bin/sh\nexec sleep 30\n")
    hang.chmod(0o755)
    with pytest.raises(ImexError, match=r"nvidia-imex-ctl -q did not answer within 0\.3s"):
        query_daemon(str(hang), tmp_path / "imexd.cfg", 0.3)
