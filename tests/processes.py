"""Finding processes by their command line, shared by the tiers that check nothing was left running."""

from __future__ import annotations

import os
from pathlib import Path


def processes_mentioning(text: str) -> dict[int, str]:
    """PID -> command line of every other running process whose command line contains ``text``."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # gone meanwhile
        if text in cmdline:
            found[int(entry.name)] = cmdline
    return found
