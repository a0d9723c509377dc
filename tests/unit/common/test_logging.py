"""Logging configuration: klog's text and component-base's JSON, verbosity, vmodule, libraries, context."""

import io
import json
import logging
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

from imexdra.common.errors import ConfigError
from imexdra.common.observability.logformat import parse_line
from imexdra.common.observability.logging import REQUEST_LOGGER, configure_logging, log_context

THIS_FILE = Path(__file__).name
KLOG_HEADER = re.compile(r"^([IWE])(\d{4}) (\d\d:\d\d:\d\d\.\d{6}) +(\d+) ([^ ]+):(\d+)\] ")


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """Undo configure_logging's global changes after each test."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    structlog.reset_defaults()
    root.handlers, root.level = handlers, level
    logging.getLogger(REQUEST_LOGGER).setLevel(logging.NOTSET)


def json_lines(stream: io.StringIO) -> list[dict[str, object]]:
    """Parse every line written so far."""
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_text_is_the_default_and_follows_klogs_layout() -> None:
    """Without a format, lines are klog's: severity, date, time, pid in 7 columns, file:line, message."""
    out = io.StringIO()
    configure_logging(0, stream=out)
    structlog.get_logger().info("ComputeDomain ready", key="ns/a", nodes=2, ready=True)
    line = out.getvalue().rstrip("\n")
    match = KLOG_HEADER.match(line)
    assert match, line
    assert match.group(1) == "I" and match.group(5) == THIS_FILE
    assert (
        line[match.end(3) : match.start(4)].startswith(" ")
        and len(line[match.end(3) + 1 : match.end(4)]) == 7
    )
    assert int(match.group(4)) == os.getpid()
    assert line[match.end() :] == '"ComputeDomain ready" key="ns/a" nodes=2 ready=true'


def test_text_severity_letters() -> None:
    """Warnings are W and errors E, as klog writes them."""
    out = io.StringIO()
    configure_logging(0, stream=out)
    log = structlog.get_logger()
    log.warning("careful")
    log.error("broken")
    assert [line[0] for line in out.getvalue().splitlines()] == ["W", "E"]


def test_json_has_component_base_keys_in_order() -> None:
    """JSON lines start ts, caller, msg, v; the keys follow as given; ts is milliseconds."""
    out = io.StringIO()
    configure_logging(0, log_format="json", stream=out)
    structlog.get_logger().info("thing happened", count=3, key="ns/a")
    (line,) = json_lines(out)
    assert list(line) == ["ts", "caller", "msg", "v", "count", "key"]
    assert line["msg"] == "thing happened" and line["v"] == 0 and line["count"] == 3
    assert str(line["caller"]).startswith(f"common/{THIS_FILE}:")
    assert isinstance(line["ts"], float) and line["ts"] > 1e12


@pytest.mark.parametrize("verbosity", [0, 1, 2, 3, 5, 7])
def test_a_line_at_level_n_shows_from_v_n(verbosity: int) -> None:
    """``v=N`` is klog's V(N): shown exactly when -v >= N; debug without v= is at 4."""
    out = io.StringIO()
    configure_logging(verbosity, log_format="json", stream=out)
    log = structlog.get_logger()
    for level in range(8):
        log.info(f"at {level}", v=level)
    log.debug("debug")
    shown = [line["msg"] for line in json_lines(out)]
    expected = [f"at {level}" for level in range(verbosity + 1)] + (["debug"] if verbosity >= 4 else [])
    assert shown == expected
    assert [line["v"] for line in json_lines(out)][: verbosity + 1] == list(range(verbosity + 1))


def test_vmodule_raises_verbosity_for_matching_files_only() -> None:
    """``--vmodule=test_logging=5`` shows this file's V(5) lines at -v=0; other patterns do not."""
    out = io.StringIO()
    configure_logging(0, log_format="json", vmodule="other=7,test_log*=5", stream=out)
    log = structlog.get_logger()
    log.info("five", v=5)
    log.info("six", v=6)
    assert [line["msg"] for line in json_lines(out)] == ["five"]
    out = io.StringIO()
    configure_logging(0, log_format="json", vmodule="unit/common/test_logging=3", stream=out)
    log.info("three", v=3)
    configure_logging(0, log_format="json", vmodule="elsewhere/test_logging=3", stream=out)
    log.info("not here", v=3)
    assert [line["msg"] for line in json_lines(out)] == ["three"]


def test_vmodule_malformed_is_a_config_error() -> None:
    """A vmodule item without =N is reported against the vmodule field."""
    with pytest.raises(ConfigError, match="vmodule"):
        configure_logging(0, vmodule="reconciler")


def test_errors_carry_err_and_no_v_and_no_locals() -> None:
    """An exception becomes ``err`` (type and message) and a traceback without local variables."""
    out = io.StringIO()
    configure_logging(0, log_format="json", stream=out)
    secret = "token-123"  # noqa: F841 - must not leak into the log
    try:
        raise ValueError("bad")
    except ValueError:
        structlog.get_logger().exception("failed", key="k")
    (line,) = json_lines(out)
    assert line["err"] == "ValueError: bad" and "v" not in line and line["key"] == "k"
    assert "raise ValueError" in str(line["stacktrace"])
    assert "token-123" not in out.getvalue()


def test_text_error_puts_err_first_and_the_traceback_indented_below() -> None:
    """klog's ErrorS puts err= right after the message; the traceback lines follow, tab-indented."""
    out = io.StringIO()
    configure_logging(0, stream=out)
    try:
        raise KeyError("x")
    except KeyError:
        structlog.get_logger().exception("lookup failed", key="k")
    first, *trace = out.getvalue().splitlines()
    assert first.startswith("E") and first.endswith('] "lookup failed" err="KeyError: \'x\'" key="k"')
    assert trace and all(line.startswith("\t") for line in trace)


def test_library_logs_rendered_like_ours() -> None:
    """stdlib logging from libraries goes through the same layout, with the logger name and caller."""
    out = io.StringIO()
    configure_logging(0, log_format="json", stream=out)
    logging.getLogger("somelib").warning("disk %s", "full")
    (line,) = json_lines(out)
    assert (line["msg"], line["logger"], line["v"]) == ("disk full", "somelib", 0)
    assert str(line["caller"]).startswith(f"common/{THIS_FILE}:")


@pytest.mark.parametrize(("verbosity", "level"), [(5, logging.WARNING), (6, logging.DEBUG)], ids=["v5", "v6"])
def test_api_request_logs_from_v6(verbosity: int, level: int) -> None:
    """The transport's per-request logs are enabled from -v=6."""
    out = io.StringIO()
    configure_logging(verbosity, log_format="json", stream=out)
    assert logging.getLogger(REQUEST_LOGGER).level == level
    logging.getLogger(REQUEST_LOGGER).info("HTTP Request: GET /api")
    assert [line["v"] for line in json_lines(out)] == ([6] if verbosity >= 6 else [])


def test_library_debug_records_from_v4() -> None:
    """A library's debug records count as verbosity 4."""
    out = io.StringIO()
    configure_logging(3, log_format="json", stream=out)
    logging.getLogger("somelib").debug("quiet")
    configure_logging(4, log_format="json", stream=out)
    logging.getLogger("somelib").debug("loud")
    assert [(line["msg"], line["v"]) for line in json_lines(out)] == [("loud", 4)]


def test_unknown_format_is_a_config_error() -> None:
    """A bad --logging-format value is reported against that field."""
    with pytest.raises(ConfigError, match="logging_format"):
        configure_logging(0, log_format="xml")


def test_log_context_binds_within_block_only() -> None:
    """Values bound with log_context appear on lines inside the block and not after it."""
    out = io.StringIO()
    configure_logging(0, log_format="json", stream=out)
    log = structlog.get_logger()
    with log_context(key="ns/a"):
        log.info("inside")
    log.info("outside")
    inside, outside = json_lines(out)
    assert inside["key"] == "ns/a"
    assert "key" not in outside


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_parse_line_reads_back_what_was_written(log_format: str) -> None:
    """Both layouts read back into the same message and typed keys."""
    out = io.StringIO()
    configure_logging(0, log_format=log_format, stream=out)
    value = {"nested": [1, "two", None], "quote": 'say "hi"\nbye'}
    structlog.get_logger().warning("Checkpoint written", path="/x y", count=2, ok=False, value=value)
    entries = [entry for entry in map(parse_line, out.getvalue().splitlines()) if entry is not None]
    (entry,) = entries
    assert entry["msg"] == "Checkpoint written"
    assert (entry["path"], entry["count"], entry["ok"], entry["value"]) == ("/x y", 2, False, value)
    assert str(entry["caller"]).split("/")[-1].startswith(f"{THIS_FILE}:")
