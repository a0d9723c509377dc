"""The two line layouts and their reader, without the logging stack (fixed time, pid and caller)."""

import time

import pytest

from imexdra.common.errors import ConfigError
from imexdra.common.observability.logformat import Record, parse_line, render_json, render_text, short_caller
from imexdra.common.observability.verbosity import module_level, parse_vmodule

WHEN = time.mktime((2025, 11, 25, 14, 27, 53, 0, 0, -1)) + 0.921739


def record(severity: str = "info", **changes: object) -> Record:
    """A record logged at 14:27:53.921739 local time on 25 November from reconciler.py line 123."""
    base: dict[str, object] = {
        "severity": severity,
        "verbosity": 2,
        "timestamp": WHEN,
        "path": "/app/imexdra/controller/reconciler.py",
        "line": 123,
        "message": "ComputeDomain ready",
    }
    return Record(**{**base, **changes})  # type: ignore[arg-type]


def test_text_line_is_klogs_layout_byte_for_byte() -> None:
    """The header is klog's to the column; the message is quoted, values are JSON."""
    line = render_text(record(), {"key": "ns/a", "nodes": 2}, pid=12345)
    assert line == 'I1125 14:27:53.921739   12345 reconciler.py:123] "ComputeDomain ready" key="ns/a" nodes=2'


def test_json_line_is_component_bases_layout() -> None:
    """ts in milliseconds, the short caller, msg, v, then the keys; errors have err and no v."""
    line = render_json(record(), {"key": "ns/a"})
    assert line.startswith('{"ts":') and line.endswith(
        ',"caller":"controller/reconciler.py:123","msg":"ComputeDomain ready","v":2,"key":"ns/a"}'
    )
    error = render_json(record("error", error=ValueError("bad")), {})
    assert '"err":"ValueError: bad"' in error and '"v"' not in error


def test_a_key_named_like_a_layout_key_does_not_replace_it() -> None:
    """A caller's ``msg=`` cannot overwrite the message of a JSON line."""
    assert '"msg":"ComputeDomain ready"' in render_json(record(), {"msg": "other"})


def test_short_caller_without_a_directory() -> None:
    """A bare file name stays bare."""
    assert short_caller("script.py", 7) == "script.py:7"


@pytest.mark.parametrize(
    "line",
    [
        "",
        "Traceback (most recent call last):",
        "I1125 14:27:53.921739   12345 x.py:1] unquoted message",
        'I1125 14:27:53.921739   12345 x.py:1] "m" key=unquoted',
        '{"not": "a log line"}',
        "{broken",
    ],
)
def test_parse_line_ignores_what_is_not_a_log_line(line: str) -> None:
    """Other output (tracebacks, IMEX's own lines, stray JSON) reads as None."""
    assert parse_line(line) is None


def test_parse_line_text_gives_severity_pid_and_caller() -> None:
    """A text line gives what its header holds."""
    entry = parse_line(render_text(record("warning"), {"a": [1]}, pid=7))
    assert entry == {
        "severity": "warning",
        "pid": 7,
        "caller": "reconciler.py:123",
        "msg": "ComputeDomain ready",
        "a": [1],
    }


def test_vmodule_parsing_and_matching() -> None:
    """Patterns glob the file name without .py; with / they match trailing path parts; first wins."""
    vmodule = parse_vmodule("reconcil*=6, controller/status.py=3,status=1")
    assert vmodule == (("reconcil*", 6), ("controller/status", 3), ("status", 1))
    assert module_level(vmodule, "/app/imexdra/controller/reconciler.py") == 6
    assert module_level(vmodule, "/app/imexdra/controller/status.py") == 3
    assert module_level(vmodule, "/app/imexdra/daemon/status.py") == 1
    assert module_level(vmodule, "/app/imexdra/daemon/run.py") is None
    assert parse_vmodule("") == ()
    with pytest.raises(ConfigError, match="vmodule"):
        parse_vmodule("status=high")
