"""A ``resource.k8s.io/v1`` ResourceClaimStatus shaped exactly as Go would re-marshal it.

The checkpoint stores each claim's full status, and the Go plugin checksums its re-marshalling of
the Go structs (docs/compatibility.md §2.5). ``canonical_claim_status()`` therefore turns a status dict
from any source (raw API JSON, a typed client's ``to_dict()``) into what a Go round trip yields:
struct field order, ``omitempty`` rules, Go zero values for missing non-omitempty fields, sorted map
keys, and unknown fields dropped (Go's decoder drops them too). Payloads that Go keeps verbatim
(``opaque.parameters``, ``data``) pass through untouched.

Compare statuses only in canonical form (the PrepareAborted "same status" check, docs/data-path.md §7.1).
The field tables follow the k8s.io/api v0.36 Go types.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from imexdra.dra.gojson import JsonValue

Kind = Literal["str", "int", "bool", "ptr", "slice", "map", "struct", "raw"]


@dataclass(frozen=True, slots=True)
class _Field:
    key: str
    kind: Kind
    omitempty: bool = False
    fields: tuple[_Field, ...] | None = None  # for struct, pointer-to-struct, slice-of-struct


def _f(key: str, kind: Kind, omitempty: bool = False, fields: tuple[_Field, ...] | None = None) -> _Field:
    return _Field(key, kind, omitempty, fields)


_NODE_SELECTOR_REQUIREMENT = (_f("key", "str"), _f("operator", "str"), _f("values", "slice", True))
_NODE_SELECTOR_TERM = (
    _f("matchExpressions", "slice", True, _NODE_SELECTOR_REQUIREMENT),
    _f("matchFields", "slice", True, _NODE_SELECTOR_REQUIREMENT),
)
_NODE_SELECTOR = (_f("nodeSelectorTerms", "slice", False, _NODE_SELECTOR_TERM),)
_TOLERATION = (
    _f("key", "str", True),
    _f("operator", "str", True),
    _f("value", "str", True),
    _f("effect", "str", True),
    _f("tolerationSeconds", "ptr", True),
)
_RESULT = (
    _f("request", "str"),
    _f("driver", "str"),
    _f("pool", "str"),
    _f("device", "str"),
    _f("adminAccess", "ptr", True),
    _f("tolerations", "slice", True, _TOLERATION),
    _f("bindingConditions", "slice", True),
    _f("bindingFailureConditions", "slice", True),
    _f("shareID", "ptr", True),
    _f("consumedCapacity", "map", True),
)
_OPAQUE = (_f("driver", "str"), _f("parameters", "raw"))
_CONFIG = (_f("source", "str"), _f("requests", "slice", True), _f("opaque", "ptr", True, _OPAQUE))
_DEVICE_ALLOCATION = (_f("results", "slice", True, _RESULT), _f("config", "slice", True, _CONFIG))
_ALLOCATION = (
    _f("devices", "struct", True, _DEVICE_ALLOCATION),  # omitempty on a struct is a no-op in Go
    _f("nodeSelector", "ptr", True, _NODE_SELECTOR),
    _f("allocationTimestamp", "ptr", True),
)
_CONSUMER = (_f("apiGroup", "str", True), _f("resource", "str"), _f("name", "str"), _f("uid", "str"))
_CONDITION = (
    _f("type", "str"),
    _f("status", "str"),
    _f("observedGeneration", "int", True),
    _f("lastTransitionTime", "raw"),  # a metav1.Time value: zero marshals as null
    _f("reason", "str"),
    _f("message", "str"),
)
_NETWORK_DATA = (
    _f("interfaceName", "str", True),
    _f("ips", "slice", True),
    _f("hardwareAddress", "str", True),
)
_DEVICE_STATUS = (
    _f("driver", "str"),
    _f("pool", "str"),
    _f("device", "str"),
    _f("shareID", "ptr", True),
    _f("conditions", "slice", False, _CONDITION),
    _f("data", "ptr", True),
    _f("networkData", "ptr", True, _NETWORK_DATA),
)
_CLAIM_STATUS = (
    _f("allocation", "ptr", True, _ALLOCATION),
    _f("reservedFor", "slice", True, _CONSUMER),
    _f("devices", "slice", True, _DEVICE_STATUS),
)

_ZERO: dict[str, JsonValue] = {
    "str": "",
    "int": 0,
    "bool": False,
    "ptr": None,
    "slice": None,
    "map": None,
    "raw": None,
}


def canonical_claim_status(status: object) -> dict[str, JsonValue]:
    """Return ``status`` as Go's round trip through ``ResourceClaimStatus`` would produce it.

    ``status`` is parsed JSON; None reads as an empty status.

    Raises:
        ValueError: a field has a JSON type Go could not decode into the struct.

    """
    return _struct(status, _CLAIM_STATUS, "status")


def _struct(value: Any, fields: tuple[_Field, ...], path: str) -> dict[str, JsonValue]:
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{path}: expected an object, got {type(value).__name__}")
    out: dict[str, JsonValue] = {}
    for field in fields:
        item = _field(value.get(field.key), field, f"{path}.{field.key}")
        if field.omitempty and field.kind != "struct" and _is_empty(item, field.kind):
            continue
        out[field.key] = item
    return out


def _field(value: Any, field: _Field, path: str) -> JsonValue:
    kind = field.kind
    if kind == "struct":
        return _struct(value, field.fields or (), path)
    if value is None:
        return _ZERO[kind]
    if kind == "str" and not isinstance(value, str):
        raise ValueError(f"{path}: expected a string, got {type(value).__name__}")
    if kind == "slice":
        if not isinstance(value, list | tuple):
            raise ValueError(f"{path}: expected a list, got {type(value).__name__}")
        if field.fields is None:
            return list(value)
        return [_struct(item, field.fields, f"{path}[{i}]") for i, item in enumerate(value)]
    if kind == "map":
        if not isinstance(value, Mapping):
            raise ValueError(f"{path}: expected an object, got {type(value).__name__}")
        return {key: value[key] for key in sorted(value)}
    if kind == "ptr" and field.fields is not None:
        return _struct(value, field.fields, path)
    return value


def _is_empty(value: JsonValue, kind: Kind) -> bool:
    if kind in ("slice", "map"):
        return value is None or len(value) == 0
    if kind in ("ptr", "raw"):
        return value is None
    return bool(value == _ZERO[kind] and type(value) is type(_ZERO[kind]))
