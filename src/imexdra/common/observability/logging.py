"""Logging for every component: structlog, configured once by each ``main()``, never at import time.

Lines look like upstream's (klog's text by default, component-base's JSON on request; the layouts are
in :mod:`imexdra.common.observability.logformat` and docs/logging.md), and verbosity means what
klog's ``-v`` means:

- every line is logged at a verbosity: ``log.info(msg, v=2, ...)`` is klog's ``V(2).Info``; without
  ``v=`` info, warning and error lines are at 0 and ``log.debug`` lines at :data:`DEBUG_VERBOSITY`;
- a line is written when its verbosity is at most ``-v``, or at most the level ``--vmodule`` gives the
  file it was logged from (``reconciler=6``: a glob on the file name without ``.py``, as klog's is on
  the Go file name; a pattern with ``/`` matches that many trailing path parts);
- library logs (grpclib, asyncio...) go through the stdlib root logger, are written in the same
  layout and count as verbosity 0, debug records as :data:`DEBUG_VERBOSITY`; the per-request lines of
  the API transport (logger ``imexdra.requests``) are shown from :data:`REQUEST_VERBOSITY`, as
  client-go's are. ``--vmodule`` does not reach library loggers.

Values bound with :func:`log_context` (the work queue binds ``queue`` and ``key``; the kubelet plugin
binds the claim) appear on every line logged inside the block, across awaits.

Messages are sentences in upstream's wording where upstream has the line (so a user's grep finds it),
details go into keys, not into the message.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import Any, TextIO

import structlog
from structlog.typing import EventDict, WrappedLogger

from imexdra.common.errors import ConfigError
from imexdra.common.observability.logformat import Record, render_json, render_text
from imexdra.common.observability.verbosity import VModule, module_level, parse_vmodule

#: Verbosity of ``log.debug`` lines that give no ``v=``; also where library debug records land.
DEBUG_VERBOSITY = 4
#: Verbosity of the per-request lines (client-go logs requests from ``-v=6``).
REQUEST_VERBOSITY = 6

#: Stdlib loggers that log one line per API request: the HTTP library's, and ours for the controller's
#: own write transport (which does not go through the library).
REQUEST_LOGGER = "imexdra.requests"
_REQUEST_LOGGERS = (REQUEST_LOGGER,)

#: The formats ``--logging-format`` takes.
LOG_FORMATS = ("text", "json")

_SEVERITIES = {"debug": "info", "info": "info", "warning": "warning", "warn": "warning"}
_SEVERITIES |= {"error": "error", "exception": "error", "critical": "error", "fatal": "error"}
# Frames inside these modules are logging machinery, not the caller a line names.
_MACHINERY = ("structlog", "logging", __name__)


def _caller(frame: FrameType | None) -> tuple[str, int]:
    """File and line of the first frame outside the logging machinery."""
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if not module.startswith(_MACHINERY):
            return frame.f_code.co_filename, frame.f_lineno
        frame = frame.f_back
    return "?", 0


class _Writer:
    """structlog's last processor: decides whether a line is shown and renders it in one layout."""

    def __init__(self, verbosity: int, vmodule: VModule, log_format: str) -> None:
        self.verbosity = verbosity
        self.vmodule = vmodule
        self.json = log_format == "json"
        self.pid = os.getpid()
        # The file → level lookup runs on lines above -v only; source files are few, so keep every one.
        self._levels: dict[str, int | None] = {}

    def shown(self, verbosity: int, path: str) -> bool:
        """Whether a line at ``verbosity`` logged from ``path`` passes ``-v`` and ``--vmodule``."""
        if verbosity <= self.verbosity:
            return True
        if not self.vmodule:
            return False
        if path not in self._levels:
            self._levels[path] = module_level(self.vmodule, path)
        level = self._levels[path]
        return level is not None and verbosity <= level

    def __call__(self, _logger: WrappedLogger, method: str, event_dict: EventDict) -> str:
        """Render a structlog call; lines above the verbosity are dropped here."""
        record_ = event_dict.pop("_record", None)
        event_dict.pop("_from_structlog", None)
        verbosity = event_dict.pop("v", DEBUG_VERBOSITY if method == "debug" else 0)
        if isinstance(record_, logging.LogRecord):
            path, line = record_.pathname, record_.lineno
            verbosity = _record_verbosity(record_)
            event_dict.setdefault("logger", record_.name)
        else:
            path, line = _caller(sys._getframe(1))
            if not self.shown(verbosity, path):
                raise structlog.DropEvent
        record = Record(
            severity=_SEVERITIES.get(method, "info"),
            verbosity=verbosity,
            timestamp=time.time(),
            path=path,
            line=line,
            message=str(event_dict.pop("event", "")),
            error=_exception(event_dict.pop("exc_info", None)),
        )
        event_dict.pop("positional_args", None)
        if self.json:
            return render_json(record, event_dict)
        return render_text(record, event_dict, pid=self.pid)


def _record_verbosity(record: logging.LogRecord) -> int:
    if record.name in _REQUEST_LOGGERS or record.name.split(".")[0] in _REQUEST_LOGGERS:
        return REQUEST_VERBOSITY
    return DEBUG_VERBOSITY if record.levelno < logging.INFO else 0


def _exception(exc_info: Any) -> BaseException | None:
    """The exception an ``exc_info`` value means (True: the one being handled)."""
    if isinstance(exc_info, BaseException):
        return exc_info
    if isinstance(exc_info, tuple):
        return exc_info[1] if isinstance(exc_info[1], BaseException) else None
    return sys.exc_info()[1] if exc_info else None


def configure_logging(
    verbosity: int = 0,
    *,
    log_format: str = "text",
    vmodule: str | Sequence[tuple[str, int]] = (),
    stream: TextIO | None = None,
) -> None:
    """Set up structlog and the stdlib root logger for this process.

    Args:
        verbosity: klog's ``-v`` (see the module docstring).
        log_format: ``"text"`` (klog's layout) or ``"json"`` (component-base's).
        vmodule: klog's ``--vmodule``, as given or parsed by :func:`parse_vmodule`.
        stream: where lines go; stderr by default. Every line is flushed as it is written.

    """
    if log_format not in LOG_FORMATS:
        raise ConfigError(f"unknown log format {log_format!r}; use text or json", field="logging_format")
    modules = parse_vmodule(vmodule) if isinstance(vmodule, str) else tuple(vmodule)
    out = stream if stream is not None else sys.stderr
    writer = _Writer(verbosity, modules, log_format)
    most = max([verbosity, *(level for _, level in modules)])
    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, writer],
        # Level 0 drops debug calls before any processor runs (they are at verbosity >= 1).
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG if most > 0 else logging.INFO),
        logger_factory=structlog.PrintLoggerFactory(out),
        # Not cached, so structlog.testing.capture_logs keeps working in tests of code that logs.
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[structlog.contextvars.merge_contextvars, structlog.stdlib.ExtraAdder()],
            processors=[writer],
            keep_exc_info=False,
        )
    )
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(logging.DEBUG if verbosity >= DEBUG_VERBOSITY else logging.INFO)
    request_level = logging.DEBUG if verbosity >= REQUEST_VERBOSITY else logging.WARNING
    for name in _REQUEST_LOGGERS:
        logging.getLogger(name).setLevel(request_level)


@contextmanager
def log_context(**values: Any) -> Iterator[None]:
    """Bind ``values`` to every line logged inside the block (task-local, survives awaits)."""
    with structlog.contextvars.bound_contextvars(**values):
        yield
