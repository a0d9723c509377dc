"""Whether the host's own nvidia-imex is ready, asked the way an operator asks it (HostManagedIMEX).

Under HostManagedIMEX the node's ``nvidia-imex.service`` owns IMEX. Before a channel claim is prepared,
the kubelet plugin runs the driver's ``nvidia-imex-ctl -q --u=<socket>`` against that service's
command socket (``IMEX_HOST_SOCKET_PATH``, docs/host-managed.md). The program is the node's: it is
looked up in the driver root's binary directories (docs/driver-root.md), never on the plugin's
``PATH``. The socket path is the host's; the chart mounts its directory at the same path.

Ready means exit code 0 and an output line that is exactly ``READY``. Upstream accepts any output that
contains ``READY``, which would also accept a ``NOT_READY`` answer; docs/compatibility.md notes the
difference. Every failure — no program, no answer in time, an answer other than ready — is a
``HostImexNotReadyError`` saying what was run and what it said.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from imexdra.common.errors import RetryableError
from imexdra.devices.driverroot import BINARY_DIRS, driver_binaries
from imexdra.devices.imexctl import run_query

CTL_NAME = "nvidia-imex-ctl"
READY_LINE = "READY"
DEFAULT_TIMEOUT = 10.0
#: How much of nvidia-imex-ctl's output goes into an error message (it ends up in a pod event).
_OUTPUT_LIMIT = 300


class HostImexNotReadyError(RetryableError):
    """The host's nvidia-imex is not ready, or its readiness could not be read."""


class HostImexReadiness(Protocol):
    """The host IMEX readiness check the plugin runs before preparing a channel."""

    async def check(self) -> None:
        """Return when the host's nvidia-imex answers ready; raise ``HostImexNotReadyError`` otherwise."""
        ...


def is_ready(returncode: int, output: str) -> bool:
    """Whether an ``nvidia-imex-ctl -q`` run says ready: exit 0 and a line that is exactly ``READY``."""
    return returncode == 0 and any(line.strip() == READY_LINE for line in output.splitlines())


def _quoted(output: str) -> str:
    """``output`` on one line, shortened, for an error message."""
    text = " ".join(output.split())
    if len(text) > _OUTPUT_LIMIT:
        text = text[:_OUTPUT_LIMIT] + "..."
    return repr(text) if text else "nothing"


@dataclass(frozen=True, slots=True)
class CtlHostImex:
    """Runs the driver root's ``nvidia-imex-ctl -q --u=<socket>``."""

    driver_root: Path
    socket: Path
    timeout: float = DEFAULT_TIMEOUT

    def command(self, ctl: Path) -> list[str]:
        """The command line, as upstream's plugin runs it."""
        return [str(ctl), "-q", f"--u={self.socket}"]

    async def check(self) -> None:
        """Run the query once; raise ``HostImexNotReadyError`` unless it says ready."""
        ctl = driver_binaries(self.driver_root, (CTL_NAME,)).get(CTL_NAME)
        if ctl is None:
            raise HostImexNotReadyError(
                f"{CTL_NAME} not found under driver root {self.driver_root} (searched "
                f"{', '.join(BINARY_DIRS)}); the node's NVIDIA driver install must provide it"
            )
        not_ready = f"host IMEX not ready at {self.socket}"
        try:
            result = await asyncio.to_thread(run_query, self.command(ctl), self.timeout)
        except TimeoutError:  # before OSError, of which it is a subclass
            raise HostImexNotReadyError(
                f"{not_ready}: {CTL_NAME} -q did not answer within {self.timeout:g}s"
            ) from None
        except OSError as error:
            raise HostImexNotReadyError(f"{not_ready}: cannot run {ctl}: {error}") from error
        code, output = result.returncode, result.output
        if not is_ready(code, output):
            raise HostImexNotReadyError(
                f"{not_ready}: {CTL_NAME} -q exited {code} and said {_quoted(output)}; the node's "
                "nvidia-imex service must be running with its command service on that socket"
            )
