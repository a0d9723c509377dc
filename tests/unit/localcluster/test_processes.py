"""``Supervisor.restart``: a SIGKILLed child comes back with the same argv, log and stop-order place."""

from __future__ import annotations

from pathlib import Path

from imexdra_sim.localcluster.processes import Supervisor, wait_until


def test_restart_kills_and_starts_the_same_argv_in_place(tmp_path: Path) -> None:
    supervisor = Supervisor(tmp_path)
    first = supervisor.start("first", ["sh", "-c", "echo started; exec sleep 60"])
    second = supervisor.start("second", ["sleep", "60"])
    log = first.log_path
    try:
        wait_until("the first child's output", lambda: log.read_text() == "started\n", timeout=10)
        again = supervisor.restart(first)

        assert not first.alive() and first.popen.returncode == -9  # SIGKILLed, not terminated
        assert again.alive() and again.popen.pid != first.popen.pid
        assert (again.name, again.argv, again.log_path) == (first.name, first.argv, first.log_path)
        assert supervisor.processes == [again, second]  # still stopped after "second"
        wait_until("the restarted child's output", lambda: log.read_text().count("started") == 2, timeout=10)
        assert log.read_text().splitlines() == ["started", "started"]  # appended, not truncated
    finally:
        supervisor.stop_all()


def test_restart_of_an_exited_child_just_starts_it(tmp_path: Path) -> None:
    supervisor = Supervisor(tmp_path)
    done = supervisor.start("done", ["true"])
    done.popen.wait(timeout=10)
    try:
        again = supervisor.restart(done)
        assert again.alive() or again.popen.wait(timeout=10) == 0
        assert supervisor.processes == [again]
    finally:
        supervisor.stop_all()
