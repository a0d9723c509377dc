"""The two line formats Kubernetes components write, and a reader for both.

``text`` is klog's header layout, what upstream's driver writes by default::

    I1125 14:27:53.921739   12345 reconciler.py:123] "ComputeDomain ready" key="ns/name" nodes=2

severity letter (``I``nfo, ``W``arning, ``E``rror), month and day, local wall time to the microsecond,
the process id right-aligned in 7 columns, the calling file and line, then the message and the keys.
As klog does for structured calls, the message is a quoted string; values are written as JSON
(strings quoted, numbers and booleans bare, lists and maps compact), so a line reads back without
ambiguity. An exception's traceback follows its line, indented.

``json`` is component-base's ``--logging-format=json`` layout: ``ts`` (milliseconds since the epoch, a
float), ``caller`` (``dir/file.py:line``), ``msg``, ``v`` (the verbosity the line was logged at;
absent on errors, as there), ``err`` (the exception, on lines that carry one), then the keys as given.

:func:`parse_line` reads either back into the JSON layout's keys, for tools and tests that inspect
component logs whatever format they were written in.
"""

from __future__ import annotations

import json
import os
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

#: Severity letters klog puts first on a text line, by our severities.
SEVERITY_LETTERS = {"info": "I", "warning": "W", "error": "E"}
_SEVERITY_NAMES = {letter: name for name, letter in SEVERITY_LETTERS.items()}


@dataclass(frozen=True, slots=True)
class Record:
    """One line to write: everything but the keys, which stay in the order they were given."""

    severity: str
    """``info``, ``warning`` or ``error``."""
    verbosity: int
    timestamp: float
    """Seconds since the epoch."""
    path: str
    """The calling source file (absolute or as the interpreter saw it)."""
    line: int
    message: str
    error: BaseException | None = None


def _value_json(value: Any) -> bytes:
    """A value as compact JSON; anything JSON has no type for (paths, enums, objects) as its ``str``."""
    return msgspec.json.encode(value, enc_hook=str)


def short_caller(path: str, line: int) -> str:
    """``dir/file.py:line``, the JSON layout's caller (zap's short form: the last directory and file)."""
    head, _, name = path.rpartition(os.sep)
    parent = head.rpartition(os.sep)[2]
    return f"{parent}/{name}:{line}" if parent else f"{name}:{line}"


def error_text(error: BaseException) -> str:
    """The exception as one line, ``Type: message`` (a bare ``str`` of a KeyError says only ``'x'``)."""
    return traceback.format_exception_only(error)[-1].strip()


def render_text(record: Record, keys: Mapping[str, Any], *, pid: int) -> str:
    """The record as a klog text line (plus the traceback of an exception, indented, on the next lines)."""
    local = time.localtime(record.timestamp)
    micros = int(record.timestamp * 1_000_000) % 1_000_000
    letter = SEVERITY_LETTERS[record.severity]
    header = (
        f"{letter}{local.tm_mon:02d}{local.tm_mday:02d} {local.tm_hour:02d}:{local.tm_min:02d}:"
        f"{local.tm_sec:02d}.{micros:06d} {pid:7d} {record.path.rpartition(os.sep)[2]}:{record.line}] "
    )
    parts = [header, json.dumps(record.message, ensure_ascii=False)]
    if record.error is not None:
        parts.append(f" err={json.dumps(error_text(record.error), ensure_ascii=False)}")
    for key, value in keys.items():
        parts.append(f" {key}={_value_json(value).decode()}")
    text = "".join(parts)
    if record.error is not None and record.error.__traceback__ is not None:
        trace = "".join(traceback.format_exception(record.error)).rstrip("\n")
        text += "\n" + "\n".join("\t" + line for line in trace.splitlines())
    return text


def render_json(record: Record, keys: Mapping[str, Any]) -> str:
    """The record as one component-base JSON object (keys that clash with the layout's are dropped)."""
    document: dict[str, Any] = {
        "ts": round(record.timestamp * 1000, 3),
        "caller": short_caller(record.path, record.line),
        "msg": record.message,
    }
    if record.severity == "error":
        if record.error is not None:
            document["err"] = error_text(record.error)
    else:
        document["v"] = record.verbosity
    for key, value in keys.items():
        document.setdefault(key, value)
    if record.error is not None and record.error.__traceback__ is not None:
        # Without locals: frames' variables could hold tokens or whole API objects.
        document.setdefault("stacktrace", "".join(traceback.format_exception(record.error)))
    return _value_json(document).decode()


def parse_line(line: str) -> dict[str, Any] | None:
    """One log line in either format, as the JSON layout's keys; None for anything else.

    A text line gives ``severity`` (``info``, ``warning``, ``error``), ``pid``, ``caller`` (the file
    name and line), ``msg``, ``err`` if present, and its keys; it has no ``v``, which klog's text does
    not write. A JSON line is returned as written. Traceback lines and other output give None.
    """
    line = line.strip()
    if line.startswith("{"):
        try:
            document = json.loads(line)
        except json.JSONDecodeError:
            return None
        return document if isinstance(document, dict) and "msg" in document else None
    return _parse_text(line)


def _parse_text(line: str) -> dict[str, Any] | None:
    severity = _SEVERITY_NAMES.get(line[:1])
    header, sep, rest = line.partition("] ")
    fields = header.split()
    if severity is None or not sep or len(fields) != 4 or not rest.startswith('"'):
        return None
    decoder = json.JSONDecoder()
    try:
        message, position = decoder.raw_decode(rest)
        entry: dict[str, Any] = {"severity": severity, "pid": int(fields[2]), "caller": fields[3]}
        entry["msg"] = message
        while position < len(rest):
            if rest[position] != " ":
                return None
            key, equals, _ = rest[position + 1 :].partition("=")
            if not equals or not key:
                return None
            entry[key], position = decoder.raw_decode(rest, position + 1 + len(key) + 1)
    except ValueError:
        return None
    return entry
