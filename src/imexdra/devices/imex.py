"""The nvidia-imex boundary: one IMEX daemon process and its control tool, behind a small Protocol.

The compute-domain daemon supervises exactly one ``nvidia-imex -c <config>`` child and asks
``nvidia-imex-ctl -c <config> -q`` whether it is ready. ``Imex`` is that whole surface:

- ``start`` / ``signal`` / ``stop`` / ``wait`` for the child process (one at a time), and the last
  lines it printed (``output_tail``: IMEX says why it exits only there);
- ``query`` for the readiness answer, usable from another process (the ``check`` probe) because it
  reaches the daemon through the command service named in the config, not through the child handle.

Backends: ``imex_real.SubprocessImex`` runs the binaries (the real ones on a GPU node, the fake ones
of ``imexdra_sim.devices.fakeimex`` on a simulated node); ``imexdra_sim.devices.imex_fake.FakeImex`` is
an in-memory stand-in for unit tests of supervision logic. This module also owns the facts every
backend and the fake binaries share: the config file syntax, the exact ``READY`` answer and IMEX's
SIGUSR1 rate limit. Deliberately stdlib-only, so the short-lived probe and control processes start
fast.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from imexdra.common.errors import RetryableError

#: What ``nvidia-imex-ctl -q`` prints, byte for byte, when the local daemon is ready.
READY_OUTPUT = "READY\n"
#: IMEX processes SIGUSR1 at most once per this many seconds and ignores extra signals
#: (docs/hardware.md §7.1), so a supervisor must space its signals at least this far apart.
SIGUSR1_MIN_INTERVAL = 5.0

#: Config keys the driver and the fake binaries read (names as in NVIDIA's config.cfg).
SERVER_PORT = "SERVER_PORT"
BIND_INTERFACE_IP = "BIND_INTERFACE_IP"
NODE_CONFIG_FILE = "IMEX_NODE_CONFIG_FILE"
CMD_ENABLED = "IMEX_CMD_ENABLED"
CMD_BIND_INTERFACE_IP = "IMEX_CMD_BIND_INTERFACE_IP"
CMD_PORT = "IMEX_CMD_PORT"
CMD_UNIX_DOMAIN_PATH = "IMEX_CMD_UNIX_DOMAIN_PATH"
LOG_FILE_NAME = "LOG_FILE_NAME"

DEFAULT_CONFIG_PATH = "/etc/nvidia-imex/config.cfg"
DEFAULT_NODE_CONFIG_PATH = "/etc/nvidia-imex/nodes_config.cfg"
DEFAULT_SERVER_PORT = 50000


class ImexError(RetryableError):
    """The IMEX process could not be started, signalled or queried."""


def parse_config(text: str) -> dict[str, str]:
    """Parse IMEX's ``KEY=VALUE`` config text; ``#`` comments and blank lines are skipped.

    Keys and values are whitespace-trimmed, a key may have an empty value, and a later line wins.
    Lines without ``=`` are ignored, as IMEX ignores them.
    """
    values: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, equals, value = line.partition("=")
        if equals and key.strip():
            values[key.strip()] = value.strip()
    return values


def config_int(config: Mapping[str, str], key: str, default: int | None = None) -> int | None:
    """An integer config value, ``default`` when the key is absent or empty.

    Raises:
        ValueError: the value is not an integer.

    """
    raw = config.get(key, "")
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{key}={raw!r} is not an integer") from None


def parse_node_list(text: str) -> list[str]:
    """The entries of a nodes config file: one address or hostname per line, in order."""
    return [line.strip() for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]


@dataclass(frozen=True, slots=True)
class QueryResult:
    """What ``nvidia-imex-ctl -q`` returned: its exit code and stdout+stderr as one text."""

    returncode: int
    output: str

    @property
    def ready(self) -> bool:
        """Ready means exit 0 and exactly ``READY`` plus a newline (upstream's probe compares bytes)."""
        return self.returncode == 0 and self.output == READY_OUTPUT


class Imex(Protocol):
    """One nvidia-imex instance: its child process (at most one at a time) and its readiness query."""

    @property
    def pid(self) -> int | None:
        """PID of the running child, None when none is running."""
        ...

    @property
    def output_tail(self) -> tuple[str, ...]:
        """The last lines the running (or last) child printed, oldest first, without line ends."""
        ...

    async def start(self) -> int:
        """Start the child and return its PID; raises ``ImexError`` if one is running or it cannot start."""
        ...

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the running child; raises ``ImexError`` when none is running."""
        ...

    async def wait(self) -> int:
        """Wait for the running child to exit and return its exit code (negative: killed by a signal)."""
        ...

    async def stop(self, *, grace: float) -> int | None:
        """SIGTERM the child, SIGKILL it after ``grace`` seconds; its exit code, None if none ran."""
        ...

    async def query(self) -> QueryResult:
        """Ask the daemon's command service whether it is ready (``nvidia-imex-ctl -q``)."""
        ...
