"""Opaque ComputeDomain configs: decoding, strictness, normalisation, validation and encoding.

Aspects covered: every accepted input form (bytes, str, parsed dict); each rejection rule with the
field it names; strict versus lenient decoding; encode/decode round trips; and, property-based, that
no input whatsoever makes the decoder raise anything but ``ConfigError``.
"""

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from imexdra.api.constants import DRIVER_NAME, AllocationMode
from imexdra.api.opaque import (
    ComputeDomainChannelConfig,
    ComputeDomainDaemonConfig,
    OpaqueConfig,
    decode_opaque_config,
    encode_opaque_config,
    opaque_device_configuration,
)
from imexdra.common.errors import ConfigError
from tests.unit.api.opaque_inputs import (
    API_VERSION,
    UID,
    assert_valid_or_config_error,
    json_values,
    plausible_documents,
)


def channel(**fields: Any) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "ComputeDomainChannelConfig", "domainID": UID, **fields}


def daemon(**fields: Any) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "ComputeDomainDaemonConfig", "domainID": UID, **fields}


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (channel(), ComputeDomainChannelConfig(domain_id=UID, allocation_mode=AllocationMode.SINGLE)),
        (channel(allocationMode="Single"), ComputeDomainChannelConfig(domain_id=UID)),
        (
            channel(allocationMode="All"),
            ComputeDomainChannelConfig(domain_id=UID, allocation_mode=AllocationMode.ALL),
        ),
        (channel(allocationMode=""), ComputeDomainChannelConfig(domain_id=UID)),
        (channel(allocationMode=None), ComputeDomainChannelConfig(domain_id=UID)),
        (daemon(), ComputeDomainDaemonConfig(domain_id=UID)),
    ],
    ids=[
        "channel-default-mode",
        "channel-single",
        "channel-all",
        "channel-empty-mode",
        "channel-null-mode",
        "daemon",
    ],
)
def test_decode_valid(document: dict[str, Any], expected: OpaqueConfig) -> None:
    """Valid configs decode to the typed object; an absent or empty allocationMode normalises to Single."""
    assert decode_opaque_config(document) == expected


@pytest.mark.parametrize(
    "as_input",
    [json.dumps, lambda doc: json.dumps(doc).encode(), lambda doc: bytearray(json.dumps(doc).encode()), dict],
    ids=["str", "bytes", "bytearray", "parsed"],
)
def test_decode_accepts_every_input_form(as_input: Any) -> None:
    """JSON text as str or bytes and already-parsed JSON give the same result."""
    assert decode_opaque_config(as_input(channel(allocationMode="All"))) == ComputeDomainChannelConfig(
        domain_id=UID, allocation_mode=AllocationMode.ALL
    )


@pytest.mark.parametrize(
    ("raw", "field", "message"),
    [
        (
            channel(unexpectedField="foo"),
            "unexpectedField",
            'strict decoding error: unknown field "unexpectedField"',
        ),
        (
            daemon(allocationMode="Single"),
            "allocationMode",
            'strict decoding error: unknown field "allocationMode"',
        ),
        (channel(DomainID=UID), "DomainID", 'strict decoding error: unknown field "DomainID"'),
        (
            f'{{"apiVersion":"{API_VERSION}","kind":"ComputeDomainDaemonConfig","domainID":"a","domainID":"b"}}',
            "domainID",
            'strict decoding error: duplicate field "domainID"',
        ),
        (channel(allocationMode="foo"), "allocationMode", 'unsupported value "foo"'),
        (channel(allocationMode="single"), "allocationMode", 'unsupported value "single"'),
        (channel(allocationMode=1), "allocationMode", "expected a string, got number"),
        (channel(domainID=""), "domainID", "cannot be empty"),
        (channel(domainID="  "), "domainID", "cannot be empty"),
        (daemon(domainID=None), "domainID", "cannot be empty"),
        ({"apiVersion": API_VERSION, "kind": "ComputeDomainDaemonConfig"}, "domainID", "cannot be empty"),
        (daemon(domainID=7), "domainID", "expected a string, got number"),
        (channel(kind="GpuConfig"), "kind", '"GpuConfig" is not a ComputeDomain device configuration'),
        (
            channel(kind="ComputeDomain"),
            "kind",
            '"ComputeDomain" is not a ComputeDomain device configuration',
        ),
        (channel(kind="Bogus"), "kind", 'no kind "Bogus" is registered'),
        (channel(kind=""), "kind", "missing"),
        (channel(kind=["ComputeDomainChannelConfig"]), "kind", "missing"),
        ({"apiVersion": API_VERSION, "domainID": UID}, "kind", "missing"),
        (channel(apiVersion="resource.nvidia.com/v1"), "apiVersion", 'unsupported "resource.nvidia.com/v1"'),
        (channel(apiVersion=None), "apiVersion", "unsupported null"),
        ({"kind": "ComputeDomainChannelConfig", "domainID": UID}, "apiVersion", "unsupported null"),
        ("[]", None, "expected a JSON object, got array"),
        (["ComputeDomainChannelConfig"], None, "expected a JSON object, got array"),
        ("null", None, "expected a JSON object, got null"),
        ("{", None, "not valid JSON"),
        (b"\xff\xfe\xfa", None, "not valid JSON"),
        ('{"apiVersion": NaN}', None, "not valid JSON"),
    ],
    ids=[
        "unknown-field",
        "channel-field-on-daemon",
        "field-names-are-case-sensitive",
        "duplicate-field",
        "unknown-allocation-mode",
        "allocation-mode-is-case-sensitive",
        "allocation-mode-not-string",
        "empty-domain-id",
        "blank-domain-id",
        "null-domain-id",
        "missing-domain-id",
        "domain-id-not-string",
        "gpu-kind",
        "crd-kind",
        "unknown-kind",
        "empty-kind",
        "kind-not-string",
        "missing-kind",
        "wrong-api-version",
        "null-api-version",
        "missing-api-version",
        "json-array",
        "parsed-array",
        "json-null",
        "truncated-json",
        "not-utf8",
        "nan",
    ],
)
def test_decode_rejects(raw: object, field: str | None, message: str) -> None:
    """Each invalid config raises ConfigError naming the offending field."""
    with pytest.raises(ConfigError) as caught:
        decode_opaque_config(raw)
    assert caught.value.field == field
    assert message in str(caught.value)


def test_lenient_decoding_drops_unknown_fields() -> None:
    """Lenient decoding (checkpoints, Unprepare) ignores unknown and duplicate fields but still validates."""
    envelope = f'"apiVersion":"{API_VERSION}","kind":"ComputeDomainChannelConfig"'
    raw = f'{{{envelope},"domainID":"a","domainID":"b","x":1}}'
    assert decode_opaque_config(raw, strict=False) == ComputeDomainChannelConfig(domain_id="b")
    with pytest.raises(ConfigError, match="allocationMode"):
        decode_opaque_config(channel(allocationMode="foo", extra=True), strict=False)


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (
            ComputeDomainChannelConfig(domain_id=UID),
            {
                "apiVersion": API_VERSION,
                "kind": "ComputeDomainChannelConfig",
                "domainID": UID,
                "allocationMode": "Single",
            },
        ),
        (
            ComputeDomainChannelConfig(domain_id=UID, allocation_mode=AllocationMode.ALL),
            {
                "apiVersion": API_VERSION,
                "kind": "ComputeDomainChannelConfig",
                "domainID": UID,
                "allocationMode": "All",
            },
        ),
        (
            ComputeDomainDaemonConfig(domain_id=UID),
            {"apiVersion": API_VERSION, "kind": "ComputeDomainDaemonConfig", "domainID": UID},
        ),
    ],
    ids=["channel-single", "channel-all", "daemon"],
)
def test_encode_matches_upstream_template(config: OpaqueConfig, expected: dict[str, str]) -> None:
    """Encoding writes the kind/apiVersion envelope, and allocationMode always, as upstream templates do."""
    encoded = encode_opaque_config(config)
    assert encoded == expected
    assert decode_opaque_config(msgspec.json.encode(encoded)) == config


@pytest.mark.parametrize(
    ("config", "field"),
    [
        (ComputeDomainChannelConfig(domain_id=""), "domainID"),
        (ComputeDomainDaemonConfig(domain_id=""), "domainID"),
        (ComputeDomainChannelConfig(domain_id=UID, allocation_mode="Many"), "allocationMode"),  # type: ignore[arg-type]
        (ComputeDomainChannelConfig(domain_id=UID, allocation_mode=""), "allocationMode"),  # type: ignore[arg-type]
    ],
    ids=["channel-empty-domain", "daemon-empty-domain", "unknown-mode", "empty-mode"],
)
def test_encode_refuses_invalid_config(config: OpaqueConfig, field: str) -> None:
    """The controller cannot write a config the kubelet plugin would reject."""
    with pytest.raises(ConfigError) as caught:
        encode_opaque_config(config)
    assert caught.value.field == field


def test_opaque_device_configuration_addresses_this_driver() -> None:
    """The opaque entry for a claim template names the compute-domain driver and carries the config."""
    opaque = opaque_device_configuration(ComputeDomainDaemonConfig(domain_id=UID))
    assert opaque.driver == DRIVER_NAME
    assert decode_opaque_config(opaque.parameters) == ComputeDomainDaemonConfig(domain_id=UID)


@settings(max_examples=300)
@given(raw=st.binary(max_size=200), strict=st.booleans())
def test_any_bytes_give_config_or_config_error(raw: bytes, strict: bool) -> None:
    """Arbitrary bytes decode to a valid config or raise ConfigError, never another exception."""
    assert_valid_or_config_error(raw, strict=strict)


@settings(max_examples=300)
@given(raw=st.text(max_size=200), strict=st.booleans())
def test_any_text_gives_config_or_config_error(raw: str, strict: bool) -> None:
    """Arbitrary text decodes to a valid config or raises ConfigError, never another exception."""
    assert_valid_or_config_error(raw, strict=strict)


@settings(max_examples=300)
@given(document=json_values | plausible_documents, strict=st.booleans(), as_text=st.booleans())
def test_any_json_gives_config_or_config_error(document: object, strict: bool, as_text: bool) -> None:
    """Any JSON value, parsed or as text, decodes to a valid config or raises ConfigError."""
    assert_valid_or_config_error(json.dumps(document) if as_text else document, strict=strict)


def test_deeply_nested_json_is_a_config_error() -> None:
    """JSON nested past the parser's recursion limit is reported as invalid, not as a crash."""
    with pytest.raises(ConfigError, match="not valid JSON"):
        decode_opaque_config("[" * 100_000 + "]" * 100_000)
