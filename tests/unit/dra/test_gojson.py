"""Go-compatible JSON encoding, the spew-FNV checksum (docs/compatibility.md §2.5) and member spans."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from imexdra.dra import gojson


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b'{"checksum":0}', 4166374854),
        (b'{"checksum":0,"v1":{}}', 1083090442),
        (b'{"checksum":0,"nodeBootID":"3f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"}', 719341321),
        (b"", 4046067964),
    ],
    ids=["checksum-only", "empty-v1", "boot-id", "empty-input"],
)
def test_checksum_reference_vectors(data: bytes, expected: int) -> None:
    """The checksum matches every test vector above."""
    assert gojson.checksum(data) == expected


@given(st.binary(max_size=300))
def test_checksum_matches_byte_by_byte_fnv(data: bytes) -> None:
    """The checksum equals textbook FNV-1a over the spew text, for any length."""
    text = ("([]uint8)[" + " ".join(str(b) for b in data) + "]").encode()
    value = 0x811C9DC5
    for byte in text:
        value = ((value ^ byte) * 0x01000193) % 2**32
    assert gojson.checksum(data) == value


def test_checksum_is_not_plain_fnv_over_bytes() -> None:
    """The quirk: hashing the raw bytes with FNV-1a gives a different value than the spew rendering."""
    value = 0x811C9DC5
    for byte in b'{"checksum":0}':
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    assert value != gojson.checksum(b'{"checksum":0}')


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"b": 1, "a": [True, None]}, b'{"b":1,"a":[true,null]}'),
        ("<a&b>", b'"\\u003ca\\u0026b\\u003e"'),
        ("\u2028\u2029", b'"\\u2028\\u2029"'),
        ("é😀\x7f", '"é😀\x7f"'.encode()),
        ("\b\f\n\r\t\x01", b'"\\b\\f\\n\\r\\t\\u0001"'),
        (1.0, b"1"),
        (1e21, b"1e+21"),
        (1.5e-7, b"1.5e-7"),
        (1e20, b"100000000000000000000"),
        (gojson.GoNumber("1.50"), b"1.50"),
        ((1, 2), b"[1,2]"),
    ],
    ids=[
        "insertion-order-compact",
        "html-escaped",
        "line-separators",
        "utf8-raw",
        "control-chars",
        "float-integral",
        "float-exponent",
        "float-small-exponent-trimmed",
        "float-large-plain",
        "raw-number-verbatim",
        "tuple-as-array",
    ],
)
def test_encode_like_go(value: object, expected: bytes) -> None:
    """encode() reproduces Go's encoding/json output (cross-checked against go1.26 on 6k samples)."""
    assert gojson.encode(value) == expected


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(),
        lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    )
)
def test_encode_round_trips(value: object) -> None:
    """Whatever we encode parses back to the same value."""
    assert json.loads(gojson.encode(value)) == value


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(),
        lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    )
)
def test_fast_path_writes_the_same_bytes_as_the_go_rules(value: object) -> None:
    """Without floats the C-encoder fast path produces exactly the rule-by-rule encoding."""
    assert gojson.encode(value) == gojson._encode_text(value).translate(gojson._GO_ESCAPES).encode()


def test_loads_keeps_number_spelling() -> None:
    """Non-integer numbers keep their source text so re-encoding reproduces the input bytes."""
    text = '{"z":1.50,"a":2,"e":1E3}'
    assert gojson.encode(gojson.loads(text)) == text.encode()


def test_encode_rejects_foreign_types() -> None:
    """Objects JSON cannot hold are a TypeError, not silently stringified."""
    with pytest.raises(TypeError):
        gojson.encode({"a": object()})


def test_object_members_spans() -> None:
    """Member spans point at each value's exact text, whitespace tolerated."""
    text = '{ "checksum" : 12 , "v1":{"x":[1,2]},"v2":{"checksum":5}}'
    members = gojson.object_members(text)
    assert {key: text[a:b] for key, (a, b) in members.items()} == {
        "checksum": "12",
        "v1": '{"x":[1,2]}',
        "v2": '{"checksum":5}',
    }


@pytest.mark.parametrize(
    "text", ["[1]", '{"a" 1}', '{"a":1', '{"a":1 "b":2}'], ids=["array", "no-colon", "truncated", "no-comma"]
)
def test_object_members_rejects_malformed(text: str) -> None:
    """Anything but a well-formed object is a ValueError."""
    with pytest.raises(ValueError, match=r"malformed JSON object|expected"):
        gojson.object_members(text)
