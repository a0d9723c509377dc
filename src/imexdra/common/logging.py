"""Logging for every component: structlog, configured once by each ``main()``, never at import time.

- Format: ``json`` (one object per line, for log collectors in a cluster) or ``text`` (console lines,
  coloured on a terminal); unset picks ``text`` on a TTY and ``json`` otherwise.
- Verbosity maps klog's ``-v``: 0–3 log at info, 4 and up at debug, 6 and up also show every HTTP
  request to the API server (klog shows requests from ``-v=6``).
- Library logs (httpx, grpc, asyncio...) go through the stdlib root logger and are rendered like ours.
- Context: values bound with :func:`log_context` (the work queue binds ``queue`` and ``key``; the kubelet
  plugin binds the claim) appear on every line logged inside the block, across awaits.

Event names are snake_case and fixed (``reconcile_failed``); details go into keys, not into the message.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

import msgspec
import structlog
from structlog.typing import Processor

from imexdra.common.errors import ConfigError

#: Verbosity from which debug lines are logged, and from which API requests are logged too.
DEBUG_VERBOSITY = 4
REQUEST_VERBOSITY = 6

#: Stdlib loggers that log one line per API request: the HTTP library's, and ours for the controller's
#: own write transport (which does not go through the library).
REQUEST_LOGGER = "imexdra.requests"
_REQUEST_LOGGERS = ("httpx2", "httpcore2", REQUEST_LOGGER)


def level_for(verbosity: int) -> int:
    """The stdlib level for a klog-style verbosity."""
    return logging.DEBUG if verbosity >= DEBUG_VERBOSITY else logging.INFO


def _json_dumps(event: Any, **_: Any) -> str:
    return msgspec.json.encode(event, enc_hook=str).decode()


def configure_logging(
    verbosity: int = 0, *, log_format: str | None = None, stream: TextIO | None = None
) -> None:
    """Set up structlog and the stdlib root logger for this process.

    Args:
        verbosity: klog-style ``-v`` (see the module docstring).
        log_format: ``"text"``, ``"json"`` or None to choose by whether ``stream`` is a terminal.
        stream: where lines go; stderr by default.

    """
    out = stream if stream is not None else sys.stderr
    if log_format is None:
        log_format = "text" if out.isatty() else "json"
    renderer: Processor
    if log_format == "json":
        renderer = structlog.processors.JSONRenderer(serializer=_json_dumps)
        # Structured tracebacks without local variables, which could carry tokens or whole objects.
        exceptions: Processor = structlog.processors.ExceptionRenderer(
            structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
        )
    elif log_format == "text":
        renderer = structlog.dev.ConsoleRenderer(colors=out.isatty())
        exceptions = structlog.dev.set_exc_info
    else:
        raise ConfigError(f"unknown log format {log_format!r}; use text or json", field="logging_format")
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.StackInfoRenderer(),
    ]
    level = level_for(verbosity)
    structlog.configure(
        processors=[*shared, exceptions, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.PrintLoggerFactory(out),
        # Not cached, so structlog.testing.capture_logs keeps working in tests of code that logs.
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name, structlog.stdlib.ExtraAdder()],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, exceptions, renderer],
        )
    )
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(level)
    request_level = logging.DEBUG if verbosity >= REQUEST_VERBOSITY else logging.WARNING
    for name in _REQUEST_LOGGERS:
        logging.getLogger(name).setLevel(request_level)


@contextmanager
def log_context(**values: Any) -> Iterator[None]:
    """Bind ``values`` to every line logged inside the block (task-local, survives awaits)."""
    with structlog.contextvars.bound_contextvars(**values):
        yield
