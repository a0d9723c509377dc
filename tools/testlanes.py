#!/usr/bin/env python3
"""``make test``'s lanes: the test tiers as concurrent pytest processes, each on a network of its own.

The tiers mostly wait (grace periods, kubelets, node loss), so on the CI machine's two cores they
run side by side instead of one after the other (docs/testing.md, "Lanes"): first the seed rack's
module alone but for the unit tier, niced, which runs on beside everything (``Lane.nice``), then at
once the integration tier and the rest of the e2e tier in two lanes of about equal measured time
(``LANES``). Each lane is one pytest process with its
own clusters, temp dirs, junit and times files. All lanes but one start in a network namespace of
their own (``NETNS_SETUP``), so that their loopback, their ports (the MPI Operator's hard-coded
``:8080``, the fakecri pods' addresses on ``127.100.x.y``, every ``free_port``) and their pod
fabrics cannot collide with another lane's; the lane of the integration tier stays in the
machine's, as it needs the machine's network (test_packaging installs from PyPI). What the lanes
share is the file system (the cache's image store and binaries, which lock what they must) and the
cgroup tree (each run under a directory of its own, ``localcluster.cgroups``).

Usage: ``tools/testlanes.py --out=DIR [pytest options...]``: the options go to every lane. Exit code:
the first failed lane's (0 when every lane passed). Prints each lane's summary, the 25 slowest tests
of all lanes, and writes ``DIR/lanes.json`` (per lane: wall time, exit code, outcome counts, seconds
per module).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

TOP = Path(__file__).resolve().parent.parent

SEED_RACK = ("tests/e2e/test_examples.py",)
"""The modules on the 18-tray seed rack: alone, that rack takes most of the CI machine's two cores; beside
the other lanes (measured: the machine's load average past 300) its workers and the other lanes' pods
missed their timeouts, so it runs first, by itself (``phase`` 1)."""

#: The e2e modules of the first e2e lane; the second runs every other e2e module. Chosen by the
#: modules' measured seconds (docs/testing.md, "Lanes"): the two halves differ by less than a
#: module, and modules sharing a rack (tests/e2e/pool.py) stay in one lane, so no rack is brought up twice.
E2E_FIRST = (
    "tests/e2e/test_demo.py",
    "tests/e2e/test_node_loss.py",
    "tests/e2e/test_host_managed.py",
    "tests/e2e/test_channel_isolation.py",
    "tests/e2e/test_node_loss_host_managed.py",
    "tests/e2e/test_migration.py",
)


@dataclass(frozen=True)
class Lane:
    """One pytest process: what it collects and what it leaves out of that."""

    name: str
    paths: tuple[str, ...]
    ignore: tuple[str, ...] = ()
    own_network: bool = True
    """Run in a network namespace of its own; False: in the machine's (one lane at most)."""
    phase: int = 2
    """Lanes of one phase run at once; a phase starts when the one before has ended (its gating lanes)."""
    gates: bool = True
    """The next phase waits for this lane; False: it runs on beside the next phase's lanes."""
    nice: int = 0
    """The lane's niceness: above 0 it takes CPU the other lanes leave idle, not theirs."""


LANES = (
    Lane("e2e-seed", SEED_RACK, phase=1),
    # The unit tier waits on nothing but the CPU: niced, from the start, it fills the cycles the racks'
    # lanes leave idle while they wait, instead of taking a core from the seed rack or phase 2's racks.
    Lane("unit", ("tests/unit",), phase=1, gates=False, nice=10),
    # tests/integration/test_packaging.py installs the wheel's dependencies from PyPI.
    Lane("integration", ("tests/integration",), own_network=False),
    Lane("e2e-1", E2E_FIRST),
    Lane("e2e-2", ("tests/e2e",), ignore=(*SEED_RACK, *E2E_FIRST)),
)
"""Every test of ``pytest tests`` runs in exactly one lane: the last e2e lane takes what the others do
not name, so a new e2e module runs there."""

NETNS_SETUP = (
    "ip link set lo up"
    " && ip link add lane0 type veth peer name lane1"
    " && ip addr add 10.199.0.1/24 dev lane0"
    " && ip link set lane1 up && ip link set lane0 up"
    ' && exec "$@"'
)
"""Run in the lane's new network namespace before pytest: loopback up, and one non-loopback address,
as every machine has (the kubelets refuse a loopback ``--node-ip``, ``localcluster.cluster.host_ip``)."""

SLOWEST = 25
SUMMARY_START = "slowest"
"""A lane's summary is its log from pytest's ``slowest N durations`` heading on."""


@dataclass
class Running:
    """A lane's process, its log and when it started and ended."""

    lane: Lane
    directory: Path
    basetemp: Path
    process: subprocess.Popen[str]
    started: float
    log: TextIO
    ended: float = 0.0
    reader: threading.Thread | None = field(default=None, repr=False)

    @property
    def log_path(self) -> Path:
        """The lane's whole pytest output."""
        return self.directory / "pytest.log"


def pytest_argv(lane: Lane, directory: Path, basetemp: Path, extra: list[str]) -> list[str]:
    """The lane's pytest command line (run from the repository's top)."""
    return [
        str(Path(sys.executable).parent / "pytest"),
        *lane.paths,
        *(f"--ignore={path}" for path in lane.ignore),
        f"--basetemp={basetemp}",
        f"--junitxml={directory / 'junit.xml'}",
        f"--times-json={directory / 'times.json'}",
        f"--durations={SLOWEST}",
        # Concurrent sessions would rewrite one cache's last-failed list under each other.
        "-o",
        f"cache_dir=.pytest_cache/lanes/{lane.name}",
        *extra,
    ]


def start(lane: Lane, out: Path, extra: list[str]) -> Running:
    """Start ``lane`` (in a network namespace of its own if it says so); echo its progress lines."""
    directory = out / lane.name
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True)
    # Short, under /tmp: unix socket paths in tmp_path may hold at most 107 bytes.
    basetemp = Path(tempfile.mkdtemp(prefix=f"imxl-{lane.name}-", dir="/tmp")) / "t"
    netns = ["unshare", "--net", "--", "sh", "-c", NETNS_SETUP, f"lane-{lane.name}"]
    niced = ["nice", "-n", str(lane.nice)] if lane.nice else []
    argv = [*niced, *(netns if lane.own_network else []), *pytest_argv(lane, directory, basetemp, extra)]
    log = (directory / "pytest.log").open("w", buffering=1)  # a line at a time: the log is live
    process = subprocess.Popen(
        argv,
        cwd=TOP,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # Ctrl-C reaches the lanes through forward(), once each
        env={**os.environ, "PYTHONUNBUFFERED": "1"},  # pytest's output as it comes, not in blocks
    )
    running = Running(lane, directory, basetemp, process, time.monotonic(), log)
    running.reader = threading.Thread(target=_copy_output, args=(running,), daemon=True)
    running.reader.start()
    print(f"[lanes] {lane.name}: pytest {' '.join(lane.paths)} (log: {running.log_path})", flush=True)
    return running


def _copy_output(running: Running) -> None:
    """Write the lane's output to its log; print its progress lines (``[imexdra] ...``) as they come."""
    assert running.process.stdout is not None
    for line in running.process.stdout:
        running.log.write(line)
        if line.startswith("[imexdra]"):
            print(f"[{running.lane.name}] {line[len('[imexdra] ') :]}", end="", flush=True)
    running.log.close()


def wait_for(needed: list[Running], lanes: list[Running]) -> None:
    """Wait until every lane of ``needed`` has ended; say each lane's result as it ends."""
    while True:
        for running in lanes:
            if running.ended or running.process.poll() is None:
                continue
            running.ended = time.monotonic()
            if running.reader is not None:
                running.reader.join()
            seconds = running.ended - running.started
            print(f"[lanes] {running.lane.name} done in {seconds:.0f} s: {last_line(running)}", flush=True)
        if all(running.ended for running in needed):
            return
        time.sleep(0.5)


def last_line(running: Running) -> str:
    """The closing line of pytest (``== N passed in S ==``), or its exit code if it printed none."""
    lines = [line for line in running.log_path.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1].strip("= ") if lines else f"exit code {running.process.returncode}"


def summary(running: Running) -> str:
    """The lane's log from its slowest-durations section on (its last 40 lines if it has none)."""
    lines = running.log_path.read_text(errors="replace").splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("=") and SUMMARY_START in line]
    return "\n".join(lines[starts[-1] :] if starts else lines[-40:])


def slowest_tests(lanes: list[Running], count: int) -> list[tuple[float, str, str]]:
    """The ``count`` slowest tests of all lanes from their junit files: (seconds, lane, test id)."""
    found: list[tuple[float, str, str]] = []
    for running in lanes:
        path = running.directory / "junit.xml"
        if not path.exists():
            continue
        for case in ElementTree.parse(path).iter("testcase"):  # noqa: S314 (our own pytest's file)
            test = f"{case.get('classname', '')}::{case.get('name', '')}"
            found.append((float(case.get("time", 0.0)), running.lane.name, test))
    return sorted(found, reverse=True)[:count]


def outcomes(running: Running) -> dict[str, int]:
    """Counts of the lane's junit file: tests, failures, errors, skipped."""
    path = running.directory / "junit.xml"
    if not path.exists():
        return {}
    root = ElementTree.parse(path).getroot()  # noqa: S314 (our own pytest's file)
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        return {}
    return {key: int(suite.get(key, 0)) for key in ("tests", "failures", "errors", "skipped")}


def record(lanes: list[Running], started: float, ended: float) -> dict[str, Any]:
    """What ``DIR/lanes.json`` holds: the wall time of all lanes and, per lane, its figures."""
    per_lane: dict[str, Any] = {}
    for running in lanes:
        times_path = running.directory / "times.json"
        times = json.loads(times_path.read_text()) if times_path.exists() else {}
        per_lane[running.lane.name] = {
            "paths": list(running.lane.paths),
            "ignore": list(running.lane.ignore),
            "seconds": round(running.ended - running.started, 1),
            "exit_code": running.process.returncode,
            "outcomes": outcomes(running),
            "tiers": {k: round(v, 1) for k, v in times.get("tiers", {}).items()},
            "modules": {k: round(v, 1) for k, v in times.get("modules", {}).items()},
        }
    return {"wall_seconds": round(ended - started, 1), "lanes": per_lane}


def forward(lanes: list[Running]) -> None:
    """On SIGINT/SIGTERM, interrupt every lane's pytest (it then tears its clusters down) and wait."""

    def handler(signum: int, _frame: FrameType | None) -> None:
        for running in lanes:
            if running.process.poll() is None:
                # pytest is the process `exec` left in the lane's namespace wrapper: SIGINT is its Ctrl-C.
                os.kill(running.process.pid, signal.SIGINT)

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)


def main() -> int:
    """Run every lane at once; print their summaries; exit with the first failed lane's code."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True, help="where each lane's log, junit and times go")
    args, extra = parser.parse_known_args()
    if os.geteuid() != 0:
        print("[lanes] the lanes run in network namespaces of their own: run as root", file=sys.stderr)
        return 2
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    lanes: list[Running] = []
    forward(lanes)
    for phase in sorted({lane.phase for lane in LANES}):
        started_now = [start(lane, out, extra) for lane in LANES if lane.phase == phase]
        lanes.extend(started_now)
        wait_for([running for running in started_now if running.lane.gates], lanes)
    wait_for(lanes, lanes)
    ended = time.monotonic()
    for running in lanes:
        print(f"\n========== lane {running.lane.name}: {' '.join(running.lane.paths)} ==========")
        print(summary(running))
    print(f"\n========== {SLOWEST} slowest tests of all lanes ==========")
    for seconds, lane_name, test in slowest_tests(lanes, SLOWEST):
        print(f"{seconds:8.1f}s  {lane_name:<12} {test}")
    result = record(lanes, started, ended)
    (out / "lanes.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    failed = [running for running in lanes if running.process.returncode != 0]
    for running in failed:
        print(f"\n========== lane {running.lane.name} FAILED: its whole log ({running.log_path}) ==========")
        print(running.log_path.read_text(errors="replace"))
    for running in lanes:
        if running.process.returncode == 0:
            shutil.rmtree(running.basetemp.parent, ignore_errors=True)
        else:
            print(f"[lanes] {running.lane.name}: temp dirs kept in {running.basetemp}")
    print(
        f"\n[lanes] wall time {result['wall_seconds']:.0f} s; "
        + "; ".join(
            f"{name} {figures['seconds']:.0f} s ({'passed' if figures['exit_code'] == 0 else 'FAILED'})"
            for name, figures in result["lanes"].items()
        )
    )
    return failed[0].process.returncode if failed else 0


if __name__ == "__main__":
    sys.exit(main())
