"""Go ``encoding/json``-compatible bytes and the kubelet checkpoint checksum.

The upstream plugin (Go) accepts a checkpoint only if the checksum of its *own* re-marshalling
matches (docs/compatibility.md §2.5). So files we write must be byte-identical to Go's output:

- ``encode()``: compact separators, object keys in the given (insertion) order — callers build dicts
  in Go struct order and sort Go-map keys —, Go string escaping (``<``, ``>``, ``&``, U+2028/2029
  escaped; other non-ASCII raw UTF-8), Go float formatting, and ``GoNumber`` passed through verbatim
  (Go emits ``RawExtension`` payloads as compacted source text, so their numbers keep their spelling).
- ``checksum()``: FNV-1a 32 not over the bytes but over go-spew's rendering of the byte slice,
  ``([]uint8)[b0 b1 ...]`` — the quirk of the kubelet ``checkpointmanager`` hash settings.
- ``object_members()``: byte spans of a JSON object's members, so a checksum can be verified against
  the exact bytes another writer produced (the file's own spelling) rather than our re-encoding.
"""

from __future__ import annotations

import decimal
import json
import math
import re
from typing import Any

from fnv_hash_fast import fnv1a_32

JsonValue = Any  # None | bool | int | float | str | list[JsonValue] | dict[str, JsonValue]

# Characters Go escapes that Python's json module leaves alone. None of them can occur in JSON
# outside a string, so replacing them in the whole output only touches string contents.
_GO_ESCAPES = str.maketrans(
    {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}
)
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_SHORT_NEGATIVE_EXPONENT = re.compile(r"e-0(\d)$")
_DECODER = json.JSONDecoder()


class GoNumber(str):
    """A JSON number kept as its source text, emitted verbatim (see ``loads``)."""

    __slots__ = ()


def loads(text: str | bytes) -> JsonValue:
    """Parse JSON keeping object key order and the spelling of non-integer numbers."""
    return json.loads(text, parse_float=GoNumber)


def encode(value: JsonValue) -> bytes:
    """Serialise ``value`` exactly as Go's ``json.Marshal`` would serialise the same data."""
    if _has_non_integer_numbers(value):
        text = _encode_text(value)
    else:
        # Without floats Python's C encoder already writes Go's bytes (bar the escapes below).
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), check_circular=False)
    return text.translate(_GO_ESCAPES).encode("utf-8")


def _has_non_integer_numbers(value: JsonValue) -> bool:
    if isinstance(value, dict):
        return any(_has_non_integer_numbers(item) for item in value.values())
    if isinstance(value, list | tuple):
        return any(_has_non_integer_numbers(item) for item in value)
    return isinstance(value, float | GoNumber)


def _encode_text(value: JsonValue) -> str:
    if isinstance(value, dict):
        items = (
            f"{json.dumps(str(key), ensure_ascii=False)}:{_encode_text(item)}" for key, item in value.items()
        )
        return "{" + ",".join(items) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_encode_text(item) for item in value) + "]"
    if isinstance(value, GoNumber):
        return str.__str__(value)
    if isinstance(value, float):
        return _go_float(value)
    if value is None or isinstance(value, bool | int | str):
        return json.dumps(value, ensure_ascii=False)
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def _go_float(value: float) -> str:
    """Go's float64 encoding: shortest digits, plain notation unless < 1e-6 or >= 1e21."""
    if not math.isfinite(value):
        raise ValueError(f"JSON cannot represent {value}")
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    shortest = repr(value)
    if 1e-6 <= abs(value) < 1e21:
        plain = format(decimal.Decimal(shortest), "f")
        return plain.rstrip("0").rstrip(".") if "." in plain else plain
    # strconv prints at least two exponent digits; encoding/json then trims "e-07" to "e-7".
    return _SHORT_NEGATIVE_EXPONENT.sub(r"e-\1", shortest)


# go-spew prints each byte of a []uint8 in decimal.
_SPEW_DIGITS = [str(byte).encode("ascii") for byte in range(256)]


def checksum(data: bytes) -> int:
    """The kubelet checkpoint checksum of ``data`` (FNV-1a 32 over go-spew's ``([]uint8)[...]``)."""
    # The spew text is ~3.7 times the data; a C FNV-1a keeps the hash of a few-KB checkpoint at
    # ~0.1 ms instead of ~1 ms in pure Python (it runs twice per checkpoint write).
    return fnv1a_32(b"([]uint8)[" + b" ".join(map(_SPEW_DIGITS.__getitem__, data)) + b"]")


def object_members(text: str, start: int = 0) -> dict[str, tuple[int, int]]:
    """Map each member key of the JSON object at ``text[start:]`` to its value's ``(start, end)``.

    Raises:
        ValueError: the text there is not a well-formed JSON object.

    """
    try:
        return _object_members(text, start)
    except (IndexError, json.JSONDecodeError) as error:
        raise ValueError(f"malformed JSON object: {error}") from error


def _object_members(text: str, start: int) -> dict[str, tuple[int, int]]:
    index = _skip(text, start)
    if text[index] != "{":
        raise ValueError(f"expected '{{' at offset {index}")
    index = _skip(text, index + 1)
    members: dict[str, tuple[int, int]] = {}
    if text[index] == "}":
        return members
    while True:
        if text[index] != '"':
            raise ValueError(f"expected a member name at offset {index}")
        key, index = _DECODER.raw_decode(text, index)
        index = _skip(text, index)
        if text[index] != ":":
            raise ValueError(f"expected ':' at offset {index}")
        value_start = _skip(text, index + 1)
        _, value_end = _DECODER.raw_decode(text, value_start)
        members[key] = (value_start, value_end)
        index = _skip(text, value_end)
        if text[index] == "}":
            return members
        if text[index] != ",":
            raise ValueError(f"expected ',' or '}}' at offset {index}")
        index = _skip(text, index + 1)


def _skip(text: str, index: int) -> int:
    match = _WHITESPACE.match(text, index)
    return match.end() if match else index
