"""One message style for every log line of the driver (docs/logging.md §3).

Kubernetes' structured-logging conventions, which upstream's messages follow: a message starts with a
capital letter, does not end with a period, and is a constant — values go in keys, so one grep finds
every line of a kind. The exceptions are upstream's own lines that users and upstream's tests grep for
with the value inside the message (``UPSTREAM_INTERPOLATED``), and upstream's messages kept word for
word in spite of the conventions (``UPSTREAM_VERBATIM``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).parents[3] / "src/imexdra"
LEVELS = frozenset({"debug", "info", "warning", "error", "exception", "critical"})
LOGGERS = frozenset({"_log", "log", "logger"})
UPSTREAM_INTERPOLATED = (
    "Checkpointed RC cleanup: unprepared stale claim: ",
    "Checkpointed RC cleanup: partially prepared claim not stale: ",
    "Prepared devices for claim ",
    "Unprepared devices for claim ",
    "Permanent error: ",
    "Reported for a later retry: ",
    "Marked claim PrepareAborted in checkpoint: ",
    "Driver version validation passed: ",
)
UPSTREAM_VERBATIM = (
    "shutdown",
    "controller manager config",
    "leaderelection lost",
    "identified fabric clique UUID/ID",
    "Starting driver version validation for IMEXDaemonsWithDNSNames feature...",
)
"""Upstream's own lines, word for word, whatever their case and punctuation."""


def log_calls() -> list[tuple[str, ast.Call]]:
    """``file:line`` and node of every call of a logger's level method in the package."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in LEVELS
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id in LOGGERS
            ):
                found.append((f"{path.relative_to(SRC)}:{node.lineno}", node))
    return found


def message_of(call: ast.Call) -> str | None:
    """The message's constant text (an f-string's leading constant part), None if it has none."""
    if not call.args:
        return None
    first = call.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value
    if isinstance(first, ast.JoinedStr) and first.values and isinstance(first.values[0], ast.Constant):
        return str(first.values[0].value)
    return None


CALLS = log_calls()


def test_the_scan_finds_the_log_calls() -> None:
    """The scan sees the package's log lines (so the checks below check something)."""
    assert len(CALLS) > 100


@pytest.mark.parametrize(("where", "call"), CALLS, ids=[where for where, _ in CALLS])
def test_message_style(where: str, call: ast.Call) -> None:
    """A constant message, capitalised (or upstream's lower-case words), without a final period."""
    message = message_of(call)
    assert message, f"{where}: the message must be a string, first argument"
    if isinstance(call.args[0], ast.JoinedStr):
        assert message.startswith(UPSTREAM_INTERPOLATED), f"{where}: put values in keys, not the message"
    if message in UPSTREAM_VERBATIM:
        return
    assert message[0].isupper(), f"{where}: {message!r} starts lower-case"
    assert not message.rstrip().endswith("."), f"{where}: {message!r} ends with a period"
