"""The opaque device configurations of the ComputeDomain driver: decoding, validation and encoding.

Two kinds travel in ``ResourceClaim`` opaque configs under ``apiVersion: resource.nvidia.com/v1beta1``
(docs/compatibility.md §2.3, docs/data-path.md §7.2): ``ComputeDomainChannelConfig`` (the controller
writes it into the workload ResourceClaimTemplate) and ``ComputeDomainDaemonConfig`` (daemon template).
``domainID`` is the ComputeDomain's UID, not its name.

``decode_opaque_config`` is the single entry point for reading them. It returns a typed, validated
object or raises ``ConfigError`` naming the offending field; it never raises anything else, whatever it
is given. Differences from upstream, on purpose:

- ``allocationMode`` is checked against {Single, All}; upstream lets unknown values behave as Single.
  An absent or empty value normalises to Single, as upstream reads it.
- An empty ``domainID`` is a ``ConfigError`` (permanent): retrying never makes it valid.

Strict decoding (the default, used for Prepare) rejects unknown and duplicate fields with upstream's
wording, ``strict decoding error: unknown field "<name>"``, which users grep for in pod events.
Lenient decoding (``strict=False``) drops unknown fields, for data written by other driver versions
(checkpoints, Unprepare).
"""

from __future__ import annotations

import functools
import json
from typing import Any, ClassVar, NoReturn

import msgspec

from imexdra.api.constants import (
    API_VERSION,
    DRIVER_NAME,
    KIND_CHANNEL_CONFIG,
    KIND_COMPUTE_DOMAIN,
    KIND_COMPUTE_DOMAIN_CLIQUE,
    KIND_DAEMON_CONFIG,
    AllocationMode,
)
from imexdra.common.errors import ConfigError
from imexdra.common.kube.models.resource_v1 import OpaqueDeviceConfiguration

#: Kinds upstream's decoding scheme also knows; naming them gets a clearer error than "unknown kind".
_FOREIGN_KINDS = frozenset(
    {"GpuConfig", "MigDeviceConfig", "VfioDeviceConfig", KIND_COMPUTE_DOMAIN, KIND_COMPUTE_DOMAIN_CLIQUE}
)
_ENVELOPE_FIELDS = ("apiVersion", "kind")
_ALLOCATION_MODES = frozenset(AllocationMode)


class ComputeDomainChannelConfig(msgspec.Struct, kw_only=True, frozen=True):
    """Configures a workload's IMEX channel claim."""

    KIND: ClassVar[str] = KIND_CHANNEL_CONFIG

    domain_id: str = msgspec.field(name="domainID")
    allocation_mode: AllocationMode = msgspec.field(name="allocationMode", default=AllocationMode.SINGLE)

    def validate(self) -> None:
        """Raise ``ConfigError`` unless this config can be applied."""
        _require_domain_id(self.domain_id)
        if self.allocation_mode not in _ALLOCATION_MODES:
            _reject_allocation_mode(self.allocation_mode)


class ComputeDomainDaemonConfig(msgspec.Struct, kw_only=True, frozen=True):
    """Configures the IMEX daemon claim of one ComputeDomain."""

    KIND: ClassVar[str] = KIND_DAEMON_CONFIG

    domain_id: str = msgspec.field(name="domainID")

    def validate(self) -> None:
        """Raise ``ConfigError`` unless this config can be applied."""
        _require_domain_id(self.domain_id)


OpaqueConfig = ComputeDomainChannelConfig | ComputeDomainDaemonConfig
_KINDS: dict[str, type[OpaqueConfig]] = {
    KIND_CHANNEL_CONFIG: ComputeDomainChannelConfig,
    KIND_DAEMON_CONFIG: ComputeDomainDaemonConfig,
}


def decode_opaque_config(raw: object, *, strict: bool = True) -> OpaqueConfig:
    """Decode, normalise and validate one opaque config.

    Args:
        raw: JSON text (``bytes`` or ``str``), or an already-parsed JSON value such as the ``dict`` of
            ``OpaqueDeviceConfiguration.parameters``.
        strict: reject unknown and duplicate fields (user input); ``False`` drops unknown fields.

    Raises:
        ConfigError: for anything but a valid config; ``field`` names the offending field if any.

    """
    document = _parse(raw, strict=strict)
    if not isinstance(document, dict):
        raise ConfigError(f"expected a JSON object, got {_json_type(document)}")
    config_type = _config_type(document)
    known = _known_fields(config_type)
    if strict:
        for name in document:
            if name not in known:
                raise ConfigError(f'strict decoding error: unknown field "{name}"', field=str(name))
    domain_id = _string(document, "domainID")
    config: OpaqueConfig
    if config_type is ComputeDomainChannelConfig:
        mode = _parse_allocation_mode(_string(document, "allocationMode"))
        config = ComputeDomainChannelConfig(domain_id=domain_id, allocation_mode=mode)
    else:
        config = ComputeDomainDaemonConfig(domain_id=domain_id)
    config.validate()
    return config


@functools.cache
def _known_fields(config_type: type[OpaqueConfig]) -> frozenset[str]:
    # msgspec resolves the (string) annotations on every fields() call; once per kind is enough.
    return frozenset(_ENVELOPE_FIELDS) | {field.encode_name for field in msgspec.structs.fields(config_type)}


def encode_opaque_config(config: OpaqueConfig) -> dict[str, Any]:
    """Render ``config`` with its kind/apiVersion envelope (``allocationMode`` always written)."""
    config.validate()
    return {"apiVersion": API_VERSION, "kind": config.KIND, **msgspec.to_builtins(config)}


def opaque_device_configuration(config: OpaqueConfig) -> OpaqueDeviceConfiguration:
    """The ``opaque`` entry of a claim's device config, addressed to this driver."""
    return OpaqueDeviceConfiguration(driver=DRIVER_NAME, parameters=encode_opaque_config(config))


def _parse(raw: object, *, strict: bool) -> object:
    if isinstance(raw, memoryview):
        raw = raw.tobytes()
    if not isinstance(raw, bytes | bytearray | str):
        return raw
    try:
        return json.loads(
            raw,
            object_pairs_hook=_reject_duplicates if strict else dict,
            parse_constant=_reject_constant,
        )
    except (ValueError, RecursionError) as err:
        raise ConfigError(f"not valid JSON: {err}") from err


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document: dict[str, Any] = {}
    for name, value in pairs:
        if name in document:
            raise ConfigError(f'strict decoding error: duplicate field "{name}"', field=name)
        document[name] = value
    return document


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _config_type(document: dict[Any, Any]) -> type[OpaqueConfig]:
    kind = document.get("kind")
    if not isinstance(kind, str) or not kind:
        expected = " or ".join(_KINDS)
        raise ConfigError(f"missing; expected {expected}", field="kind")
    api_version = document.get("apiVersion")
    if api_version != API_VERSION:
        shown = json.dumps(api_version) if isinstance(api_version, str) else _json_type(api_version)
        raise ConfigError(f'unsupported {shown}, expected "{API_VERSION}"', field="apiVersion")
    config_type = _KINDS.get(kind)
    if config_type is not None:
        return config_type
    if kind in _FOREIGN_KINDS:
        raise ConfigError(f'"{kind}" is not a ComputeDomain device configuration', field="kind")
    raise ConfigError(f'no kind "{kind}" is registered for version "{API_VERSION}"', field="kind")


def _string(document: dict[Any, Any], name: str) -> str:
    """A string field; absent and JSON null read as ``""`` (Go's zero value)."""
    value = document.get(name)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ConfigError(f"expected a string, got {_json_type(value)}", field=name)
    return value


def _parse_allocation_mode(value: str) -> AllocationMode:
    if value == "":
        return AllocationMode.SINGLE
    if value not in _ALLOCATION_MODES:
        _reject_allocation_mode(value)
    return AllocationMode(value)


def _reject_allocation_mode(value: str) -> NoReturn:
    allowed = ", ".join(mode.value for mode in AllocationMode)
    raise ConfigError(f'unsupported value "{value}" (allowed: {allowed})', field="allocationMode")


def _require_domain_id(domain_id: str) -> None:
    if not domain_id.strip():
        raise ConfigError("cannot be empty (it must be the ComputeDomain's UID)", field="domainID")


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__
