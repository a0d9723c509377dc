"""Fuzzing opaque config decoding: any input gives a valid config or a ``ConfigError``, nothing else.

Reuses the value strategies and the oracle of ``tests/unit/api/test_opaque.py`` at soak scale, and
adds what those do not reach: every input container (``bytes``, ``bytearray``, ``memoryview``,
``str``, parsed values), textual damage to near-valid documents (cuts, stray characters, duplicated
members, ``\\u`` escapes including lone surrogates) and parsed values JSON cannot hold.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from hypothesis import example, given
from hypothesis import strategies as st

from tests.unit.api.opaque_inputs import assert_valid_or_config_error, json_values, plausible_documents
from tests.unit.fuzz.profiles import fuzz

CONTAINERS: dict[str, Callable[[str], object]] = {
    "bytes": lambda text: text.encode("utf-8", "surrogatepass"),
    "bytearray": lambda text: bytearray(text.encode("utf-8", "surrogatepass")),
    "memoryview": lambda text: memoryview(text.encode("utf-8", "surrogatepass")),
    "str": lambda text: text,
}


@st.composite
def damaged_text(draw: st.DrawFn) -> str:
    """A near-valid document as JSON text, then cut, spliced or given a duplicate member."""
    text = json.dumps(draw(plausible_documents), ensure_ascii=draw(st.booleans()))
    damage = draw(st.sampled_from(["none", "cut", "insert", "duplicate", "escape"]))
    position = draw(st.integers(0, len(text)))
    if damage == "cut":
        return text[:position]
    if damage == "insert":
        return text[:position] + draw(st.text(max_size=4)) + text[position:]
    if damage == "duplicate" and text.startswith("{") and len(text) > 2:
        member = draw(st.sampled_from(["apiVersion", "kind", "domainID", "allocationMode"]))
        return text[:-1] + f', "{member}": {json.dumps(draw(json_values))}}}'
    if damage == "escape":
        code = draw(st.integers(0, 0xFFFF))
        return text.replace('"domainID": "', f'"domainID": "\\u{code:04x}', 1)
    return text


@fuzz(ci=150, soak=15_000)
@given(text=damaged_text(), container=st.sampled_from(sorted(CONTAINERS)), strict=st.booleans())
@example(text='{"kind": "ComputeDomainChannelConfig", "domainID": "\\ud800"}', container="bytes", strict=True)
@example(text="[" * 50_000, container="memoryview", strict=False)
def test_damaged_documents(text: str, container: str, strict: bool) -> None:
    """Near-valid documents, damaged, in every input container: a valid config or ConfigError."""
    assert_valid_or_config_error(CONTAINERS[container](text), strict=strict)


@fuzz(ci=100, soak=10_000)
@given(raw=st.binary(max_size=300) | st.text(max_size=300), strict=st.booleans())
def test_raw_bytes_and_text(raw: bytes | str, strict: bool) -> None:
    """Arbitrary bytes and text: a valid config or ConfigError."""
    assert_valid_or_config_error(raw, strict=strict)


@fuzz(ci=100, soak=10_000)
@given(
    document=json_values | plausible_documents,
    strict=st.booleans(),
)
def test_parsed_json_values(document: object, strict: bool) -> None:
    """Already-parsed JSON values (the form a claim's ``parameters`` arrive in): config or ConfigError."""
    assert_valid_or_config_error(document, strict=strict)


NOT_JSON = st.one_of(
    st.sets(st.integers(), max_size=3),
    st.tuples(st.integers(), st.text(max_size=3)),
    st.floats(allow_nan=True, allow_infinity=True),
    st.complex_numbers(),
    st.dictionaries(st.integers() | st.none(), st.text(max_size=3), max_size=3),
    st.builds(object),
)


@fuzz(ci=50, soak=3_000)
@given(value=NOT_JSON, strict=st.booleans())
def test_values_json_cannot_hold(value: object, strict: bool) -> None:
    """Python values no JSON parser returns (sets, NaN, non-string keys, objects): ConfigError."""
    assert_valid_or_config_error(value, strict=strict)
