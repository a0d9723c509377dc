"""A container's fatal error as its termination message, where ``kubectl describe pod`` shows it.

The kubelet mounts ``/dev/termination-log`` (a container's default ``terminationMessagePath``) and
reports what a container left there as ``lastState.terminated.message``. Every imexdra component
writes its fatal error there before it exits, so an operator reads why a pod restarts without its
logs, and the controller repeats a daemon's on its ComputeDomain (docs/errors.md).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

TERMINATION_LOG = Path("/dev/termination-log")
"""The kubelet's default ``terminationMessagePath``."""
LIMIT = 4096
"""The kubelet keeps at most 4 KiB of a termination message."""


def write_termination_message(message: str, path: Path | None = None) -> None:
    """Leave ``message`` in the file the kubelet mounted; outside a container nothing is created."""
    target = path or TERMINATION_LOG
    if target.exists():
        with contextlib.suppress(OSError):
            target.write_text(message[:LIMIT], encoding="utf-8")
