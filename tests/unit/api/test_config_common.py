"""Option groups shared by the binaries: logging, feature gates, API client, metrics, identity, IMEX.

Aspects covered: upstream defaults; every upstream env variable feeding its option; bad values
reported as usage errors naming flag and variable; the IMEX mode/feature-gate cross-check; which IMEX
isolation each mode allows.
"""

from datetime import timedelta
from typing import Any

import pytest

from imexdra.api.featuregates import Gate, resolve_feature_gates
from imexdra.api.flags.common import (
    ImexIsolation,
    ImexMode,
    ImexSettings,
    KubeClientSettings,
    LogFormat,
    LoggingSettings,
    MetricsSettings,
    feature_gate_options,
    imex_options,
    kube_client_options,
    logging_options,
    metrics_options,
    metrics_pprof_options,
    namespace_options,
    node_name_options,
)
from imexdra.api.flags.groups import OptionGroup
from tests.unit.api.cli import invoke, settings_of

COUNT_FLAG = "'--imex-channel-count'"

DEFAULT_CASES: list[tuple[OptionGroup[Any], Any]] = [
    (logging_options, LoggingSettings(verbosity=0, logging_format=LogFormat.TEXT)),
    (kube_client_options, KubeClientSettings(kubeconfig=None, kube_api_qps=5.0, kube_api_burst=10)),
    (metrics_options, MetricsSettings(http_endpoint="", metrics_path="/metrics")),
    (namespace_options, "default"),
    (imex_options, ImexSettings(imex_mode=ImexMode.DRIVER_MANAGED, imex_isolation=ImexIsolation.DOMAIN)),
]


@pytest.mark.parametrize(("group", "expected"), DEFAULT_CASES, ids=[group.dest for group, _ in DEFAULT_CASES])
def test_upstream_defaults(group: OptionGroup[Any], expected: Any) -> None:
    """With nothing set, each group yields upstream's defaults."""
    assert settings_of(group) == expected


ENV_CASES: list[tuple[OptionGroup[Any], dict[str, str], str, Any]] = [
    (logging_options, {"V": "3"}, "verbosity", 3),
    (logging_options, {"LOG_VERBOSITY": "6"}, "verbosity", 6),
    (logging_options, {"LOGGING_FORMAT": "json"}, "logging_format", LogFormat.JSON),
    (logging_options, {"VMODULE": "reconciler=6,status=2"}, "vmodule", (("reconciler", 6), ("status", 2))),
    (logging_options, {"LOG_FLUSH_FREQUENCY": "1m30s"}, "log_flush_frequency", timedelta(seconds=90)),
    (kube_client_options, {"KUBE_API_QPS": "50"}, "kube_api_qps", 50.0),
    (kube_client_options, {"KUBE_API_BURST": "100"}, "kube_api_burst", 100),
    (metrics_options, {"HTTP_ENDPOINT": ":8081"}, "listen_address", ("", 8081)),
    (metrics_options, {"HTTP_ENDPOINT": "[::1]:9000"}, "listen_address", ("::1", 9000)),
    (metrics_options, {"METRICS_PATH": "/m"}, "metrics_path", "/m"),
    (imex_options, {"IMEX_MODE": "hostManaged"}, "imex_mode", ImexMode.HOST_MANAGED),
    (imex_options, {"IMEX_ISOLATION": ""}, "imex_isolation", ImexIsolation.DOMAIN),
    (imex_options, {"IMEX_ISOLATION": "channel"}, "imex_isolation", ImexIsolation.CHANNEL),
    (imex_options, {"IMEX_CHANNEL_COUNT": "16"}, "imex_channel_count", 16),
]


@pytest.mark.parametrize(
    ("group", "env", "attribute", "expected"), ENV_CASES, ids=[next(iter(env)) for _, env, _, _ in ENV_CASES]
)
def test_env_fallbacks(group: OptionGroup[Any], env: dict[str, str], attribute: str, expected: Any) -> None:
    """Every option reads upstream's environment variable when its flag is absent."""
    assert getattr(settings_of(group, env=env), attribute) == expected


@pytest.mark.parametrize(
    ("group", "env", "fragments"),
    [
        (node_name_options, {}, ["Missing option '--node-name'", "NODE_NAME"]),
        (node_name_options, {"NODE_NAME": "Node_A"}, ["'--node-name'", "NODE_NAME", "DNS-1123 subdomain"]),
        (namespace_options, {"NAMESPACE": "a.b"}, ["'--namespace'", "NAMESPACE", "DNS-1123 label"]),
        (logging_options, {"V": "-1"}, ["'-v' / '--v'", "x>=0"]),
        (logging_options, {"LOGGING_FORMAT": "yaml"}, ["'--logging-format'", "LOGGING_FORMAT"]),
        (
            feature_gate_options,
            {"FEATURE_GATES": "Bogus=true"},
            ["'--feature-gates'", "FEATURE_GATES", "Bogus: unrecognized"],
        ),
        (
            feature_gate_options,
            {"FEATURE_GATES": "IMEXDaemonsWithDNSNames=false"},
            ["requires IMEXDaemonsWithDNSNames"],
        ),
        (
            kube_client_options,
            {"KUBECONFIG": "/nonexistent/kubeconfig"},
            ["'--kubeconfig'", "KUBECONFIG", "does not exist"],
        ),
        (kube_client_options, {"KUBE_API_QPS": "0"}, ["'--kube-api-qps'", "KUBE_API_QPS"]),
        (kube_client_options, {"KUBE_API_BURST": "0"}, ["'--kube-api-burst'", "KUBE_API_BURST"]),
        (metrics_options, {"HTTP_ENDPOINT": "8080"}, ["'--http-endpoint'", "HTTP_ENDPOINT", "[host]:port"]),
        (metrics_options, {"HTTP_ENDPOINT": ":99999"}, ["'--http-endpoint'", "[host]:port"]),
        (
            metrics_options,
            {"METRICS_PATH": "metrics"},
            ["'--metrics-path'", "METRICS_PATH", 'start with "/"'],
        ),
        (imex_options, {"IMEX_MODE": "auto"}, ["'--imex-mode'", "IMEX_MODE"]),
        (
            imex_options,
            {"IMEX_ISOLATION": "node"},
            ["'--imex-isolation'", "IMEX_ISOLATION", 'unknown value "node"; use "domain" or "channel"'],
        ),
        (
            imex_options,
            {"IMEX_CHANNEL_COUNT": "1"},
            [COUNT_FLAG, "IMEX_CHANNEL_COUNT", '"1" is not a channel count', "from 2 to 1048576"],
        ),
        (imex_options, {"IMEX_CHANNEL_COUNT": "1048577"}, [COUNT_FLAG, "NVreg_ImexChannelCount"]),
        (imex_options, {"IMEX_CHANNEL_COUNT": "2k"}, [COUNT_FLAG, '"2k" is not a channel count']),
        (imex_options, {"IMEX_CHANNEL_COUNT": "-4"}, [COUNT_FLAG, '"-4" is not a channel count']),
        (logging_options, {"VMODULE": "reconciler"}, ["'--vmodule'", "VMODULE", "is not pattern=N"]),
        (logging_options, {"LOG_FLUSH_FREQUENCY": "often"}, ["'--log-flush-frequency'", "not a duration"]),
    ],
    ids=[
        "node-name-missing",
        "node-name-invalid",
        "namespace-invalid",
        "verbosity-negative",
        "logging-format-unknown",
        "feature-gate-unknown",
        "feature-gate-dependency",
        "kubeconfig-missing-file",
        "qps-zero",
        "burst-zero",
        "endpoint-without-colon",
        "endpoint-port-range",
        "metrics-path-relative",
        "imex-mode-unknown",
        "imex-isolation-unknown",
        "channel-count-only-channel-0",
        "channel-count-beyond-20-bit-minor",
        "channel-count-not-a-number",
        "channel-count-negative",
        "vmodule-without-level",
        "flush-frequency-not-a-duration",
    ],
)
def test_invalid_values_are_usage_errors(
    group: OptionGroup[Any], env: dict[str, str], fragments: list[str]
) -> None:
    """A bad or missing value stops the command with exit code 2 and a message naming flag and variable."""
    result, seen = invoke([group], env=env)
    assert result.exit_code == 2
    assert seen == {}
    for fragment in fragments:
        assert fragment in result.output


def test_feature_gates_default_and_env() -> None:
    """Feature gates default to the registry defaults and are read from FEATURE_GATES."""
    assert settings_of(feature_gate_options) == resolve_feature_gates("")
    gates = settings_of(feature_gate_options, env={"FEATURE_GATES": "HostManagedIMEX=true,"})
    assert gates.enabled(Gate.HOST_MANAGED_IMEX)
    assert not gates.enabled(Gate.COMPUTE_DOMAIN_CLIQUES)


@pytest.mark.parametrize(
    ("group", "env", "expected"),
    [
        (node_name_options, {"NODE_NAME": "node-a"}, "node-a"),
        (namespace_options, {"NAMESPACE": "nvidia-dra"}, "nvidia-dra"),
    ],
    ids=["NODE_NAME", "NAMESPACE"],
)
def test_single_value_groups_from_env(group: OptionGroup[Any], env: dict[str, str], expected: str) -> None:
    """Node name and driver namespace come from NODE_NAME and NAMESPACE."""
    assert settings_of(group, env=env) == expected


def test_metrics_disabled_without_endpoint() -> None:
    """No endpoint means no metrics server."""
    assert settings_of(metrics_options).listen_address is None


def test_pprof_path_is_the_controller_s_option() -> None:
    """PPROF_PATH reaches the controller's group; the shared group (the plugin's) has no such option."""
    assert settings_of(metrics_pprof_options).pprof_path == ""
    assert settings_of(metrics_pprof_options, env={"PPROF_PATH": "/debug/pprof"}).pprof_path == "/debug/pprof"
    result, _ = invoke([metrics_options], args=["--pprof-path=/debug/pprof"])
    assert result.exit_code == 2 and "No such option" in result.output


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"PPROF_PATH": "debug/pprof"}, 'must start with "/"'),
        ({"PPROF_PATH": "/"}, 'must start with "/" and not be "/" alone'),
        ({"PPROF_PATH": "/metrics"}, "would hide /metrics"),
        ({"PPROF_PATH": "/m", "METRICS_PATH": "/m/x"}, "would hide /m/x"),
        ({"PPROF_PATH": "/healthz/"}, "would hide /healthz"),
    ],
    ids=["relative", "root", "metrics-path", "metrics-below", "probe"],
)
def test_pprof_path_must_hide_nothing(env: dict[str, str], fragment: str) -> None:
    """A profiling prefix that is relative, "/" or covers the metrics or a probe path is a usage error."""
    result, seen = invoke([metrics_pprof_options], env=env)
    assert result.exit_code == 2 and seen == {}
    assert "'--pprof-path'" in result.output and fragment in result.output
