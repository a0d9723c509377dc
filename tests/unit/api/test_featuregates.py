"""Feature gates: the registry, parsing, AllAlpha/AllBeta, dependency rules and HostManagedIMEX overrides.

Aspects covered: names/defaults/stages match upstream (plus our HostManagedIMEX and
ComputeDomainBindingConditions, docs/compatibility.md §3.4); the ``--feature-gates`` syntax Go
accepts (whitespace, trailing commas, ParseBool spellings) and what it rejects; the deprecated
``HostManagedIMEXDaemon`` alias; the dependency and exclusivity rules; the HostManagedIMEX ordering
(overrides first, then validation); rendering and logging.
"""

import pytest
from structlog.testing import capture_logs

from imexdra.api.featuregates import (
    GATES,
    FeatureGates,
    Gate,
    GateOverride,
    Stage,
    apply_host_managed_overrides,
    log_feature_gates,
    resolve_feature_gates,
    validate_dependencies,
)
from imexdra.common.errors import ConfigError

#: Upstream's rendering plus our two gates (HostManagedIMEX, ComputeDomainBindingConditions).
UPSTREAM_DEFAULT_RENDERING = (
    "AllAlpha=false,AllBeta=false,ComputeDomainBindingConditions=false,ComputeDomainCliques=true,"
    "ConsumableShares=false,ContextualLogging=true,"
    "CrashOnNVLinkFabricErrors=true,DRAListTypeAttributes=false,DeviceMetadata=false,DynamicMIG=false,"
    "FabricManagerPartitioning=false,HostManagedIMEX=false,IMEXDaemonsWithDNSNames=true,"
    "LoggingAlphaOptions=false,LoggingBetaOptions=true,MPSSupport=false,NVMLDeviceHealthCheck=false,"
    "PassthroughSupport=false,TimeSlicingSettings=false,"
)


REGISTRY = [
    ("TimeSlicingSettings", False, Stage.ALPHA, "0.2"),
    ("MPSSupport", False, Stage.ALPHA, "0.2"),
    ("IMEXDaemonsWithDNSNames", True, Stage.BETA, "0.2"),
    ("PassthroughSupport", False, Stage.ALPHA, "0.3"),
    ("DynamicMIG", False, Stage.ALPHA, "0.3"),
    ("NVMLDeviceHealthCheck", False, Stage.ALPHA, "0.3"),
    ("ComputeDomainCliques", True, Stage.BETA, "0.3"),
    ("CrashOnNVLinkFabricErrors", True, Stage.BETA, "0.3"),
    ("DeviceMetadata", False, Stage.ALPHA, "0.4"),
    ("DRAListTypeAttributes", False, Stage.ALPHA, "0.4"),
    ("FabricManagerPartitioning", False, Stage.ALPHA, "0.5"),
    ("ConsumableShares", False, Stage.ALPHA, "0.5"),
    ("HostManagedIMEX", False, Stage.ALPHA, "0.5"),
    ("ComputeDomainBindingConditions", False, Stage.ALPHA, "0.6"),
    ("ContextualLogging", True, Stage.BETA, None),
    ("LoggingAlphaOptions", False, Stage.ALPHA, None),
    ("LoggingBetaOptions", True, Stage.BETA, None),
    ("AllAlpha", False, Stage.ALPHA, None),
    ("AllBeta", False, Stage.BETA, None),
]


@pytest.mark.parametrize(("name", "default", "stage", "since"), REGISTRY, ids=[name for name, *_ in REGISTRY])
def test_registry_matches_upstream(name: str, default: bool, stage: Stage, since: str | None) -> None:
    """Every gate has upstream's default, stage and introduction version (two gates are ours)."""
    spec = GATES[Gate(name)]
    assert (spec.default, spec.stage, spec.since) == (default, stage, since)
    assert resolve_feature_gates("").enabled(Gate(name)) is default


def test_registry_is_complete() -> None:
    """The table above covers every registered gate and nothing else."""
    assert set(GATES) == set(Gate)
    assert len(GATES) == 19


def test_defaults_render_like_upstream() -> None:
    """With no input, the rendering equals upstream's default daemon FEATURE_GATES (new gate name aside)."""
    gates = resolve_feature_gates("")
    assert gates.render() == UPSTREAM_DEFAULT_RENDERING
    assert gates.overrides == ()
    assert gates.deprecated_aliases == ()


@pytest.mark.parametrize(
    ("spec", "gate", "expected"),
    [
        ("MPSSupport=true", Gate.MPS_SUPPORT, True),
        (" MPSSupport = true ", Gate.MPS_SUPPORT, True),
        ("MPSSupport=true,", Gate.MPS_SUPPORT, True),
        (",,MPSSupport=true,,", Gate.MPS_SUPPORT, True),
        ("MPSSupport=1", Gate.MPS_SUPPORT, True),
        ("MPSSupport=t", Gate.MPS_SUPPORT, True),
        ("MPSSupport=T", Gate.MPS_SUPPORT, True),
        ("MPSSupport=TRUE", Gate.MPS_SUPPORT, True),
        ("MPSSupport=True", Gate.MPS_SUPPORT, True),
        ("CrashOnNVLinkFabricErrors=0", Gate.CRASH_ON_NVLINK_FABRIC_ERRORS, False),
        ("CrashOnNVLinkFabricErrors=f", Gate.CRASH_ON_NVLINK_FABRIC_ERRORS, False),
        ("CrashOnNVLinkFabricErrors=F", Gate.CRASH_ON_NVLINK_FABRIC_ERRORS, False),
        ("CrashOnNVLinkFabricErrors=FALSE", Gate.CRASH_ON_NVLINK_FABRIC_ERRORS, False),
        ("CrashOnNVLinkFabricErrors=False", Gate.CRASH_ON_NVLINK_FABRIC_ERRORS, False),
        ("MPSSupport=true,MPSSupport=false", Gate.MPS_SUPPORT, False),
        (UPSTREAM_DEFAULT_RENDERING, Gate.COMPUTE_DOMAIN_CLIQUES, True),
    ],
    ids=[
        "plain",
        "whitespace",
        "trailing-comma",
        "empty-segments",
        "one",
        "t",
        "T",
        "TRUE",
        "True",
        "zero",
        "f",
        "F",
        "FALSE",
        "False",
        "last-wins",
        "upstream-rendering",
    ],
)
def test_parse_accepts_go_syntax(spec: str, gate: Gate, expected: bool) -> None:
    """The syntax upstream's component-base accepts is accepted, with strconv.ParseBool's spellings."""
    assert resolve_feature_gates(spec).enabled(gate) is expected


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        ("Bogus=true", "Bogus", "unrecognized feature gate"),
        ("mpssupport=true", "mpssupport", "unrecognized feature gate"),
        ("=true", '""', "unrecognized feature gate"),
        ("MPSSupport", "MPSSupport", "missing value"),
        ("MPSSupport=", "MPSSupport", 'invalid value ""'),
        ("MPSSupport=yes", "MPSSupport", 'invalid value "yes"'),
        ("MPSSupport=tRuE", "MPSSupport", 'invalid value "tRuE"'),
        ("MPSSupport=on", "MPSSupport", 'invalid value "on"'),
        ("HostManagedIMEX=true,HostManagedIMEXDaemon=false", "HostManagedIMEXDaemon", "conflicts with"),
    ],
    ids=[
        "unknown-gate",
        "names-are-case-sensitive",
        "empty-name",
        "no-equals",
        "empty-value",
        "yes",
        "mixed-case",
        "on",
        "alias-conflict",
    ],
)
def test_parse_rejects(spec: str, field: str, message: str) -> None:
    """Unknown gates and values Go would not parse are ConfigErrors naming the gate."""
    with pytest.raises(ConfigError) as caught:
        resolve_feature_gates(spec)
    assert caught.value.field == field
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("IMEXDaemonsWithDNSNames=false", "ComputeDomainCliques requires IMEXDaemonsWithDNSNames"),
        ("DeviceMetadata=true", "DeviceMetadata requires PassthroughSupport"),
        (
            "DynamicMIG=true,PassthroughSupport=true",
            "DynamicMIG is currently mutually exclusive with Passthrough",
        ),
        (
            "DynamicMIG=true,NVMLDeviceHealthCheck=true",
            "DynamicMIG is currently mutually exclusive with NVML",
        ),
        ("DynamicMIG=true,MPSSupport=true", "DynamicMIG is currently mutually exclusive with MPSSupport"),
        ("PassthroughSupport=true,NVMLDeviceHealthCheck=true", "PassthroughSupport is currently mutually"),
        ("AllAlpha=true", "DynamicMIG is currently mutually exclusive"),
    ],
    ids=[
        "cliques-need-dns-names",
        "metadata-needs-passthrough",
        "mig-vs-passthrough",
        "mig-vs-health-check",
        "mig-vs-mps",
        "passthrough-vs-health-check",
        "all-alpha-trips-exclusivity",
    ],
)
def test_dependency_rules(spec: str, message: str) -> None:
    """Upstream's dependency and exclusivity rules reject broken combinations with upstream's wording."""
    with pytest.raises(ConfigError, match=message):
        resolve_feature_gates(spec)


@pytest.mark.parametrize(
    ("spec", "gate", "expected"),
    [
        ("IMEXDaemonsWithDNSNames=false,ComputeDomainCliques=false", Gate.IMEX_DAEMONS_WITH_DNS_NAMES, False),
        ("DeviceMetadata=true,PassthroughSupport=true", Gate.DEVICE_METADATA, True),
        (
            "AllBeta=false,ComputeDomainCliques=false,IMEXDaemonsWithDNSNames=false",
            Gate.CONTEXTUAL_LOGGING,
            False,
        ),
        ("AllBeta=false,CrashOnNVLinkFabricErrors=true", Gate.CRASH_ON_NVLINK_FABRIC_ERRORS, True),
        ("AllAlpha=true,DynamicMIG=false,NVMLDeviceHealthCheck=false", Gate.MPS_SUPPORT, True),
        ("AllAlpha=true,DynamicMIG=false,NVMLDeviceHealthCheck=false", Gate.ALL_BETA, False),
        ("AllAlpha=true,DynamicMIG=false,NVMLDeviceHealthCheck=false", Gate.PASSTHROUGH_SUPPORT, True),
    ],
    ids=[
        "both-dns-gates-off",
        "metadata-with-passthrough",
        "all-beta-off",
        "explicit-beats-all-beta",
        "all-alpha-on",
        "all-alpha-spares-meta-gate",
        "all-alpha-fills-unset",
    ],
)
def test_valid_combinations_and_stage_wide_gates(spec: str, gate: Gate, expected: bool) -> None:
    """Valid combinations resolve; AllAlpha/AllBeta set unset gates of their stage, explicit values win."""
    assert resolve_feature_gates(spec).enabled(gate) is expected


@pytest.mark.parametrize(
    "spec",
    [
        "HostManagedIMEX=true",
        "HostManagedIMEX=true,IMEXDaemonsWithDNSNames=false",
        "HostManagedIMEX=true,IMEXDaemonsWithDNSNames=false,ComputeDomainCliques=true",
        "HostManagedIMEX=true,ComputeDomainCliques=true,IMEXDaemonsWithDNSNames=true",
    ],
    ids=["gate-only", "dns-names-already-off", "cliques-on-dns-off", "both-explicitly-on"],
)
def test_host_managed_overrides_run_before_validation(spec: str) -> None:
    """With HostManagedIMEX on, both daemon gates end up false and validation passes."""
    gates = resolve_feature_gates(spec)
    assert gates.enabled(Gate.HOST_MANAGED_IMEX)
    assert not gates.enabled(Gate.IMEX_DAEMONS_WITH_DNS_NAMES)
    assert not gates.enabled(Gate.COMPUTE_DOMAIN_CLIQUES)
    assert all(override.value is False for override in gates.overrides)


def test_validation_alone_would_reject_what_overrides_fix() -> None:
    """Overrides come first: the unresolved values break the Cliques rule; the resolved ones pass."""
    values = {gate: spec.default for gate, spec in GATES.items()}
    values |= {Gate.HOST_MANAGED_IMEX: True, Gate.IMEX_DAEMONS_WITH_DNS_NAMES: False}
    with pytest.raises(ConfigError, match="requires IMEXDaemonsWithDNSNames"):
        validate_dependencies(values)
    resolved, overrides = apply_host_managed_overrides(values)
    validate_dependencies(resolved)
    assert resolved[Gate.IMEX_DAEMONS_WITH_DNS_NAMES] is False
    assert resolved[Gate.COMPUTE_DOMAIN_CLIQUES] is False
    assert overrides == (GateOverride(Gate.COMPUTE_DOMAIN_CLIQUES, False, "HostManagedIMEX is enabled"),)
    assert values[Gate.COMPUTE_DOMAIN_CLIQUES] is True  # the input is not modified


@pytest.mark.parametrize(
    ("spec", "forced"),
    [
        ("", ()),
        ("HostManagedIMEX=false,ComputeDomainCliques=true", ()),
        ("HostManagedIMEX=true", (Gate.IMEX_DAEMONS_WITH_DNS_NAMES, Gate.COMPUTE_DOMAIN_CLIQUES)),
        ("HostManagedIMEX=true,ComputeDomainCliques=false", (Gate.IMEX_DAEMONS_WITH_DNS_NAMES,)),
        ("HostManagedIMEX=true,ComputeDomainCliques=false,IMEXDaemonsWithDNSNames=false", ()),
        (
            "HostManagedIMEX=true,ComputeDomainBindingConditions=true",
            (Gate.IMEX_DAEMONS_WITH_DNS_NAMES, Gate.COMPUTE_DOMAIN_CLIQUES),
        ),
    ],
    ids=[
        "defaults",
        "gate-off",
        "gate-on",
        "cliques-already-off",
        "both-already-off",
        "binding-conditions-kept",
    ],
)
def test_overrides_report_only_what_was_forced(spec: str, forced: tuple[Gate, ...]) -> None:
    """Only gates that were on are forced and reported, each with its reason."""
    overrides = resolve_feature_gates(spec).overrides
    assert tuple(override.gate for override in overrides) == forced
    assert all(override.reason == "HostManagedIMEX is enabled" for override in overrides)


def test_host_managed_rendering_carries_forced_values() -> None:
    """The rendering handed to daemons carries the resolved (forced) values."""
    rendering = resolve_feature_gates("HostManagedIMEX=true").render()
    assert "HostManagedIMEX=true," in rendering
    assert "IMEXDaemonsWithDNSNames=false," in rendering
    assert "ComputeDomainCliques=false," in rendering
    assert resolve_feature_gates(rendering).render() == rendering


@pytest.mark.parametrize(
    "spec",
    ["HostManagedIMEXDaemon=true", "HostManagedIMEXDaemon=true,HostManagedIMEX=true"],
    ids=["alias-only", "alias-and-name-agree"],
)
def test_upstream_gate_name_is_a_deprecated_alias(spec: str) -> None:
    """Upstream's HostManagedIMEXDaemon turns HostManagedIMEX on and is reported as deprecated."""
    gates = resolve_feature_gates(spec)
    assert gates.enabled(Gate.HOST_MANAGED_IMEX)
    assert not gates.enabled(Gate.COMPUTE_DOMAIN_CLIQUES)
    assert gates.deprecated_aliases == ("HostManagedIMEXDaemon",)
    assert "HostManagedIMEXDaemon" not in gates.render()


def test_log_feature_gates_reports_alias_overrides_and_values() -> None:
    """Logging warns about the alias, reports each forced gate and the full effective map."""
    gates = resolve_feature_gates("HostManagedIMEXDaemon=true")
    with capture_logs() as logs:
        log_feature_gates(gates)
    warnings = [entry for entry in logs if entry["log_level"] == "warning"]
    assert warnings == [
        {
            "event": "Deprecated feature gate name",
            "gate": "HostManagedIMEXDaemon",
            "replacement": "HostManagedIMEX",
            "log_level": "warning",
        }
    ]
    forced = [entry["gate"] for entry in logs if entry["event"] == "Feature gate forced"]
    assert forced == ["IMEXDaemonsWithDNSNames", "ComputeDomainCliques"]
    summary = next(entry for entry in logs if entry["event"] == "Feature gates")
    assert summary["featureGates"]["HostManagedIMEX"] is True
    assert summary["featureGates"]["ComputeDomainCliques"] is False


def test_feature_gates_is_immutable() -> None:
    """Resolved gates are a frozen value that components can share."""
    gates = resolve_feature_gates("")
    with pytest.raises(AttributeError):
        gates.overrides = ()  # type: ignore[misc]
    assert isinstance(gates, FeatureGates)
