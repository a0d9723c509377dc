"""Logging configuration: formats, klog verbosity mapping, library logs and context binding."""

import io
import json
import logging
from collections.abc import Iterator

import pytest
import structlog

from imexdra.common.errors import ConfigError
from imexdra.common.logging import REQUEST_LOGGER, configure_logging, level_for, log_context


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """Undo configure_logging's global changes after each test."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    structlog.reset_defaults()
    root.handlers, root.level = handlers, level
    for name in ("httpx2", "httpcore2", REQUEST_LOGGER):
        logging.getLogger(name).setLevel(logging.NOTSET)


def json_lines(stream: io.StringIO) -> list[dict[str, object]]:
    """Parse every line written so far."""
    return [json.loads(line) for line in stream.getvalue().splitlines()]


@pytest.mark.parametrize(
    ("verbosity", "level"),
    [(0, logging.INFO), (3, logging.INFO), (4, logging.DEBUG), (9, logging.DEBUG)],
    ids=["v0", "v3", "v4", "v9"],
)
def test_level_for_verbosity(verbosity: int, level: int) -> None:
    """klog -v 0-3 logs info, 4 and up debug."""
    assert level_for(verbosity) == level


def test_json_lines_carry_level_time_event_and_keys() -> None:
    """JSON output is one parseable object per line with our keys."""
    out = io.StringIO()
    configure_logging(0, log_format="json", stream=out)
    structlog.get_logger("t").info("thing_happened", count=3)
    (line,) = json_lines(out)
    assert line["event"] == "thing_happened" and line["count"] == 3 and line["level"] == "info"
    assert str(line["timestamp"]).endswith("Z")


def test_debug_hidden_below_v4_shown_from_v4() -> None:
    """Debug lines appear only from verbosity 4."""
    out = io.StringIO()
    configure_logging(3, log_format="json", stream=out)
    structlog.get_logger().debug("quiet")
    assert out.getvalue() == ""
    configure_logging(4, log_format="json", stream=out)
    structlog.get_logger().debug("loud")
    assert [line["event"] for line in json_lines(out)] == ["loud"]


def test_exceptions_are_structured_without_locals() -> None:
    """Exceptions become structured tracebacks that never include local variables (tokens, objects)."""
    out = io.StringIO()
    configure_logging(0, log_format="json", stream=out)
    secret = "token-123"  # noqa: F841 - must not leak into the log
    try:
        raise ValueError("bad")
    except ValueError:
        structlog.get_logger().exception("failed")
    (line,) = json_lines(out)
    assert line["exception"][0]["exc_type"] == "ValueError"
    assert "token-123" not in out.getvalue()


def test_library_logs_rendered_like_ours() -> None:
    """stdlib logging from libraries goes through the same JSON renderer, with the logger name."""
    out = io.StringIO()
    configure_logging(0, log_format="json", stream=out)
    logging.getLogger("somelib").warning("disk %s", "full")
    (line,) = json_lines(out)
    assert (line["event"], line["logger"], line["level"]) == ("disk full", "somelib", "warning")


@pytest.mark.parametrize(("verbosity", "level"), [(5, logging.WARNING), (6, logging.DEBUG)], ids=["v5", "v6"])
def test_api_request_logs_from_v6(verbosity: int, level: int) -> None:
    """The HTTP client's and the controller transport's per-request logs are enabled from -v=6, as klog's."""
    configure_logging(verbosity, log_format="json", stream=io.StringIO())
    assert logging.getLogger("httpx2").level == level
    assert logging.getLogger(REQUEST_LOGGER).isEnabledFor(logging.INFO) == (verbosity >= 6)


def test_text_format_is_human_readable() -> None:
    """Text output is a console line, not JSON, and without colours off a terminal."""
    out = io.StringIO()
    configure_logging(0, log_format="text", stream=out)
    structlog.get_logger().info("hello", who="world")
    text = out.getvalue()
    assert "hello" in text and "who=world" in text and "\x1b[" not in text
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)


def test_format_defaults_to_json_off_a_terminal() -> None:
    """Without an explicit format, a non-TTY stream (a pod's stderr) gets JSON."""
    out = io.StringIO()
    configure_logging(0, stream=out)
    structlog.get_logger().info("auto")
    assert json_lines(out)[0]["event"] == "auto"


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
