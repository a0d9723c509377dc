"""The fake ``nvidia-imex`` program (``python -m imexdra_sim.devices.fakeimex.daemon -c <config>``).

Reads the config file once, at start (like IMEX), sets up logging as ``LOG_FILE_NAME`` says (empty or
unopenable: stderr) and runs one ``server.FakeImexDaemon``. ``DAEMONIZE`` is ignored: the fake always
stays in the foreground. ``FAKE_IMEX_HOSTS_FILE`` names the hosts file used to resolve node-list
names (default ``/etc/hosts``), ``FAKE_IMEX_PROBE_INTERVAL`` the seconds between peer probes.
``FAKE_IMEX_NODE_LOCK``, when set, names a file that stands for the node's IMEX role in the kernel
driver: like the real one, which lets one IMEX daemon per node register, the fake takes an exclusive
lock on it for its lifetime, and when another process holds it exits 1 saying ``NV_ERR_IN_USE`` (the
host's ``nvidia-imex`` service beside a driver-managed daemon). Unset: no such limit.

SIGUSR1's default action is to terminate, so the handler is installed before anything else is
imported: on a loaded machine the imports alone can take seconds, and a supervisor may signal by then.
This module is a program: run it, do not import it (importing installs that handler).
"""

from __future__ import annotations

import signal

#: SIGUSR1s that arrived before the event loop took over; one reload is done for them at start.
_EARLY_SIGNALS: list[int] = []
signal.signal(signal.SIGUSR1, lambda signum, _frame: _EARLY_SIGNALS.append(signum))

import argparse  # noqa: E402
import asyncio  # noqa: E402
import fcntl  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import TextIO  # noqa: E402

from imexdra.devices.imex import DEFAULT_CONFIG_PATH, parse_config  # noqa: E402
from imexdra_sim.devices.fakeimex.server import (  # noqa: E402
    HOSTS_FILE_ENV,
    IN_USE_MESSAGE,
    NODE_LOCK_ENV,
    PROBE_INTERVAL_ENV,
    FakeImexDaemon,
    Settings,
)


def _logger(target: str) -> Callable[[str], None]:
    stream: TextIO = sys.stderr
    if target:
        try:
            stream = Path(target).open("a", buffering=1)  # noqa: SIM115 - lives as long as the process
        except OSError:
            stream = sys.stderr  # like IMEX: an unopenable log file means stderr

    def log(message: str) -> None:
        stamp = time.strftime("%b %d %Y %H:%M:%S")
        print(f"[{stamp}] [INFO] [tid {threading.get_native_id()}] {message}", file=stream, flush=True)

    return log


def _take_node_role(path: Path) -> bool:
    """Hold the node's IMEX role (an exclusive lock on ``path``) until exit; False when it is taken."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return False
    return True  # the descriptor stays open: the kernel drops the lock when the process ends


def main(argv: list[str] | None = None) -> int:
    """Run the fake daemon; returns the exit code."""
    parser = argparse.ArgumentParser(prog="nvidia-imex", description="Simulated NVIDIA IMEX daemon.")
    parser.add_argument("-c", "--config", default=DEFAULT_CONFIG_PATH, help="config file")
    args = parser.parse_args(argv)
    try:
        config = parse_config(Path(args.config).read_text())
        settings = Settings.from_config(config)
    except (OSError, ValueError) as error:
        print(f"nvidia-imex: cannot use config file {args.config}: {error}", file=sys.stderr)
        return 1
    log = _logger(settings.log_file)
    node_lock = os.environ.get(NODE_LOCK_ENV)
    if node_lock and not _take_node_role(Path(node_lock)):
        log(IN_USE_MESSAGE)
        return 1
    daemon = FakeImexDaemon(
        settings,
        hosts_file=Path(os.environ.get(HOSTS_FILE_ENV) or "/etc/hosts"),
        probe_interval=float(os.environ.get(PROBE_INTERVAL_ENV) or 0.5),
        log=log,
    )
    return asyncio.run(daemon.run(pending_reload=bool(_EARLY_SIGNALS)))


if __name__ == "__main__":
    sys.exit(main())
