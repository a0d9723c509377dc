"""Feature gates: upstream's registry plus ``HostManagedIMEX``, parsing, forced overrides, validation.

The registry holds every gate upstream's binaries accept (docs/compatibility.md §2.8), GPU-side and
Kubernetes logging gates included, because one ``FEATURE_GATES`` value is shared by all containers
of the chart and the controller renders its full effective map into every daemon. Gates that only the
GPU driver or Go's klog act on are accepted and carried along, and do nothing here.

``resolve_feature_gates`` turns ``--feature-gates``/``FEATURE_GATES`` text into ``FeatureGates`` in
the order the HostManagedIMEX design requires (docs/compatibility.md §3.4): parse, apply the
``HostManagedIMEX`` overrides (which force ``IMEXDaemonsWithDNSNames`` and ``ComputeDomainCliques``
off), then check the dependency rules, so the "ComputeDomainCliques requires IMEXDaemonsWithDNSNames"
rule holds trivially in host-managed mode. It is pure; ``log_feature_gates`` reports the result
(forced overrides, deprecated aliases) once logging is configured. Upstream's gate name
``HostManagedIMEXDaemon`` is a deprecated alias of ``HostManagedIMEX``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from imexdra.common.errors import ConfigError


class Stage(StrEnum):
    """Maturity of a gate (component-base pre-release stages in use here)."""

    ALPHA = "Alpha"
    BETA = "Beta"


class Gate(StrEnum):
    """Every accepted gate name, by its canonical spelling."""

    ALL_ALPHA = "AllAlpha"
    ALL_BETA = "AllBeta"
    TIME_SLICING_SETTINGS = "TimeSlicingSettings"
    MPS_SUPPORT = "MPSSupport"
    IMEX_DAEMONS_WITH_DNS_NAMES = "IMEXDaemonsWithDNSNames"
    PASSTHROUGH_SUPPORT = "PassthroughSupport"
    DYNAMIC_MIG = "DynamicMIG"
    NVML_DEVICE_HEALTH_CHECK = "NVMLDeviceHealthCheck"
    COMPUTE_DOMAIN_CLIQUES = "ComputeDomainCliques"
    CRASH_ON_NVLINK_FABRIC_ERRORS = "CrashOnNVLinkFabricErrors"
    DEVICE_METADATA = "DeviceMetadata"
    DRA_LIST_TYPE_ATTRIBUTES = "DRAListTypeAttributes"
    FABRIC_MANAGER_PARTITIONING = "FabricManagerPartitioning"
    CONSUMABLE_SHARES = "ConsumableShares"
    HOST_MANAGED_IMEX = "HostManagedIMEX"
    COMPUTE_DOMAIN_BINDING_CONDITIONS = "ComputeDomainBindingConditions"
    CONTEXTUAL_LOGGING = "ContextualLogging"
    LOGGING_ALPHA_OPTIONS = "LoggingAlphaOptions"
    LOGGING_BETA_OPTIONS = "LoggingBetaOptions"


@dataclass(frozen=True, slots=True)
class GateSpec:
    """Default, stage and the driver version that introduced a gate (``None``: not a driver gate)."""

    default: bool
    stage: Stage
    since: str | None


GATES: Mapping[Gate, GateSpec] = {
    # Meta gates: set every not explicitly set alpha (beta) gate.
    Gate.ALL_ALPHA: GateSpec(False, Stage.ALPHA, None),
    Gate.ALL_BETA: GateSpec(False, Stage.BETA, None),
    Gate.TIME_SLICING_SETTINGS: GateSpec(False, Stage.ALPHA, "0.2"),
    Gate.MPS_SUPPORT: GateSpec(False, Stage.ALPHA, "0.2"),
    Gate.IMEX_DAEMONS_WITH_DNS_NAMES: GateSpec(True, Stage.BETA, "0.2"),
    Gate.PASSTHROUGH_SUPPORT: GateSpec(False, Stage.ALPHA, "0.3"),
    Gate.DYNAMIC_MIG: GateSpec(False, Stage.ALPHA, "0.3"),
    Gate.NVML_DEVICE_HEALTH_CHECK: GateSpec(False, Stage.ALPHA, "0.3"),
    Gate.COMPUTE_DOMAIN_CLIQUES: GateSpec(True, Stage.BETA, "0.3"),
    Gate.CRASH_ON_NVLINK_FABRIC_ERRORS: GateSpec(True, Stage.BETA, "0.3"),
    Gate.DEVICE_METADATA: GateSpec(False, Stage.ALPHA, "0.4"),
    Gate.DRA_LIST_TYPE_ATTRIBUTES: GateSpec(False, Stage.ALPHA, "0.4"),
    Gate.FABRIC_MANAGER_PARTITIONING: GateSpec(False, Stage.ALPHA, "0.5"),
    Gate.CONSUMABLE_SHARES: GateSpec(False, Stage.ALPHA, "0.5"),
    Gate.HOST_MANAGED_IMEX: GateSpec(False, Stage.ALPHA, "0.5"),
    # Ours: workload pods bind only once their node's IMEX daemon is Ready (docs/binding-conditions.md).
    Gate.COMPUTE_DOMAIN_BINDING_CONDITIONS: GateSpec(False, Stage.ALPHA, "0.6"),
    # Kubernetes logging gates; upstream overrides ContextualLogging's default to true.
    Gate.CONTEXTUAL_LOGGING: GateSpec(True, Stage.BETA, None),
    Gate.LOGGING_ALPHA_OPTIONS: GateSpec(False, Stage.ALPHA, None),
    Gate.LOGGING_BETA_OPTIONS: GateSpec(True, Stage.BETA, None),
}

#: Deprecated spellings accepted for compatibility with upstream's values.
ALIASES: Mapping[str, Gate] = {"HostManagedIMEXDaemon": Gate.HOST_MANAGED_IMEX}

#: (gate, gate it needs) pairs.
_REQUIRES = (
    (Gate.COMPUTE_DOMAIN_CLIQUES, Gate.IMEX_DAEMONS_WITH_DNS_NAMES),
    (Gate.DEVICE_METADATA, Gate.PASSTHROUGH_SUPPORT),
)
#: (gate, gate it cannot be combined with) pairs.
_EXCLUDES = (
    (Gate.DYNAMIC_MIG, Gate.PASSTHROUGH_SUPPORT),
    (Gate.DYNAMIC_MIG, Gate.NVML_DEVICE_HEALTH_CHECK),
    (Gate.DYNAMIC_MIG, Gate.MPS_SUPPORT),
    (Gate.PASSTHROUGH_SUPPORT, Gate.NVML_DEVICE_HEALTH_CHECK),
)
#: Gates HostManagedIMEX turns off: both describe the in-cluster daemons it replaces.
_HOST_MANAGED_FORCED_OFF = (Gate.IMEX_DAEMONS_WITH_DNS_NAMES, Gate.COMPUTE_DOMAIN_CLIQUES)

# Exactly the spellings Go's strconv.ParseBool accepts.
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


@dataclass(frozen=True, slots=True)
class GateOverride:
    """A gate value the driver imposed over what was configured, and why."""

    gate: Gate
    value: bool
    reason: str


@dataclass(frozen=True, slots=True)
class FeatureGates:
    """The effective value of every gate, with what was imposed or deprecated on the way."""

    values: Mapping[Gate, bool]
    overrides: tuple[GateOverride, ...] = ()
    #: Deprecated names that appeared in the input.
    deprecated_aliases: tuple[str, ...] = ()

    def enabled(self, gate: Gate) -> bool:
        """Tell whether ``gate`` is on."""
        return self.values[gate]

    def render(self) -> str:
        """``Name=bool,`` for every gate in name order, trailing comma included (upstream's daemon env)."""
        return "".join(f"{gate.value}={str(self.values[gate]).lower()}," for gate in sorted(self.values))


def resolve_feature_gates(spec: str) -> FeatureGates:
    """Parse ``spec``, apply the HostManagedIMEX overrides, then validate the dependency rules.

    Raises:
        ConfigError: an unknown gate, a value that is not a Go boolean, or a broken dependency rule.

    """
    explicit, aliases = _parse(spec)
    values, overrides = apply_host_managed_overrides(_effective(explicit))
    validate_dependencies(values)
    return FeatureGates(values=values, overrides=overrides, deprecated_aliases=aliases)


def apply_host_managed_overrides(
    values: Mapping[Gate, bool],
) -> tuple[dict[Gate, bool], tuple[GateOverride, ...]]:
    """Force the daemon-related gates off when HostManagedIMEX is on (docs/compatibility.md §3.4).

    Only gates that are on are forced (and reported); the input is not modified.
    """
    resolved = dict(values)
    if not resolved[Gate.HOST_MANAGED_IMEX]:
        return resolved, ()
    overrides = []
    for gate in _HOST_MANAGED_FORCED_OFF:
        if resolved[gate]:
            resolved[gate] = False
            overrides.append(GateOverride(gate, False, f"{Gate.HOST_MANAGED_IMEX.value} is enabled"))
    return resolved, tuple(overrides)


def validate_dependencies(values: Mapping[Gate, bool]) -> None:
    """Raise ``ConfigError`` when enabled gates break a dependency or exclusivity rule."""
    for gate, needed in _REQUIRES:
        if values[gate] and not values[needed]:
            raise ConfigError(f"feature gate {gate.value} requires {needed.value} to also be enabled")
    for gate, other in _EXCLUDES:
        if values[gate] and values[other]:
            raise ConfigError(f"feature gate {gate.value} is currently mutually exclusive with {other.value}")


def log_feature_gates(gates: FeatureGates) -> None:
    """Log the effective gates, each forced override and each deprecated alias used (call at start)."""
    # Imported here: parsing gates must stay cheap for short-lived processes (the daemon's probe).
    import structlog

    log = structlog.get_logger(__name__)
    for alias in gates.deprecated_aliases:
        log.warning("Deprecated feature gate name", gate=alias, replacement=ALIASES[alias].value)
    for override in gates.overrides:
        log.info(
            "Feature gate forced", gate=override.gate.value, value=override.value, reason=override.reason
        )
    # One map value, as upstream prints its gate map at startup: operators and upstream's tests grep
    # for the JSON-style ``"MPSSupport":false`` (docs/logging.md).
    effective = {gate.value: value for gate, value in sorted(gates.values.items())}
    log.info("Feature gates", featureGates=effective)


def _parse(spec: str) -> tuple[dict[Gate, bool], tuple[str, ...]]:
    """Explicit settings by canonical gate, and the deprecated aliases used; later entries win."""
    explicit: dict[Gate, bool] = {}
    via_alias: dict[str, bool] = {}
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue  # empty segments, e.g. the trailing comma upstream renders
        name, equals, raw_value = item.partition("=")
        name = name.strip()
        if not equals:
            raise ConfigError(f'missing value in "{item}" (expected {name}=true or {name}=false)', field=name)
        gate = _lookup(name)
        value = _parse_bool(name, raw_value.strip())
        if name in ALIASES:
            via_alias[name] = value
        else:
            explicit[gate] = value
    for alias, value in via_alias.items():
        gate = ALIASES[alias]
        if explicit.setdefault(gate, value) != value:
            raise ConfigError(f"conflicts with {gate.value}={str(explicit[gate]).lower()}", field=alias)
    return explicit, tuple(via_alias)


def _lookup(name: str) -> Gate:
    if name in ALIASES:
        return ALIASES[name]
    try:
        return Gate(name)
    except ValueError:
        known = ", ".join(sorted(gate.value for gate in Gate))
        raise ConfigError(f"unrecognized feature gate (known: {known})", field=name or '""') from None


def _parse_bool(name: str, raw: str) -> bool:
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ConfigError(f'invalid value "{raw}" (expected true or false)', field=name)


def _effective(explicit: Mapping[Gate, bool]) -> dict[Gate, bool]:
    """Explicit settings win, then AllAlpha/AllBeta for their stage, then the defaults."""
    stage_wide = {
        Stage.ALPHA: explicit.get(Gate.ALL_ALPHA),
        Stage.BETA: explicit.get(Gate.ALL_BETA),
    }
    values: dict[Gate, bool] = {}
    for gate, spec in GATES.items():
        if gate in explicit:
            values[gate] = explicit[gate]
        elif gate not in (Gate.ALL_ALPHA, Gate.ALL_BETA) and stage_wide[spec.stage] is not None:
            values[gate] = bool(stage_wide[spec.stage])
        else:
            values[gate] = spec.default
    return values
