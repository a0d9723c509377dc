"""Option groups of single binaries: kubelet plugin, controller (incl. leader election), daemon.

Aspects covered: upstream defaults; every upstream env variable feeding its option; bad values
reported as usage errors naming flag and variable; list splitting; derived plugin paths.
"""

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from imexdra.api.flags.controller import LeaderElectionSettings, controller_options, leader_election_options
from imexdra.api.flags.daemon import DaemonSettings, daemon_options
from imexdra.api.flags.groups import OptionGroup
from imexdra.api.flags.kubelet_plugin import KubeletPluginSettings, kubelet_plugin_options
from tests.unit.api.cli import CONTROLLER_ENV, invoke, settings_of

DEFAULT_CASES: list[tuple[OptionGroup[Any], Any]] = [
    (
        kubelet_plugin_options,
        KubeletPluginSettings(
            kubelet_registrar_directory_path=Path("/var/lib/kubelet/plugins_registry"),
            kubelet_plugins_directory_path=Path("/var/lib/kubelet/plugins"),
            cdi_root=Path("/etc/cdi"),
            nvidia_driver_root=Path("/"),
            container_driver_root=Path("/driver-root"),
            nvidia_cdi_hook_path=None,
            imex_host_socket_path=Path("/etc/nvidia-imex/imex_ctrl.sock"),
            healthcheck_port=-1,
            gpu_clique_label_enabled=False,
            fabric_registration_timeout=timedelta(minutes=5),
        ),
    ),
    (
        leader_election_options,
        LeaderElectionSettings(
            enabled=False,
            lease_lock_namespace="default",
            lease_lock_name="nvidia-compute-domain-controller",
            lease_duration=timedelta(seconds=15),
            renew_deadline=timedelta(seconds=10),
            retry_period=timedelta(seconds=2),
        ),
    ),
    (
        daemon_options,
        DaemonSettings(
            clique_id="",
            compute_domain_uuid="",
            compute_domain_name="",
            compute_domain_namespace="default",
            pod_ip="",
            pod_uid="",
            pod_name="",
            pod_namespace="",
            max_nodes_per_imex_domain=18,
        ),
    ),
]


@pytest.mark.parametrize(("group", "expected"), DEFAULT_CASES, ids=[group.dest for group, _ in DEFAULT_CASES])
def test_upstream_defaults(group: OptionGroup[Any], expected: Any) -> None:
    """With nothing set, each group yields upstream's defaults."""
    assert settings_of(group) == expected


ENV_CASES: list[tuple[OptionGroup[Any], dict[str, str], str, Any]] = [
    (kubelet_plugin_options, {"CDI_ROOT": "/var/run/cdi"}, "cdi_root", Path("/var/run/cdi")),
    (
        kubelet_plugin_options,
        {"KUBELET_REGISTRAR_DIRECTORY_PATH": "/r"},
        "kubelet_registrar_directory_path",
        Path("/r"),
    ),
    (
        kubelet_plugin_options,
        {"KUBELET_PLUGINS_DIRECTORY_PATH": "/p"},
        "kubelet_plugins_directory_path",
        Path("/p"),
    ),
    (kubelet_plugin_options, {"HEALTHCHECK_PORT": "51515"}, "healthcheck_port", 51515),
    (
        kubelet_plugin_options,
        {"NVIDIA_DRIVER_ROOT": "/run/nvidia/driver"},
        "nvidia_driver_root",
        Path("/run/nvidia/driver"),
    ),
    (kubelet_plugin_options, {"HOST_DRIVER_ROOT": "/host"}, "nvidia_driver_root", Path("/host")),
    (kubelet_plugin_options, {"DRIVER_ROOT_CTR_PATH": "/dr"}, "container_driver_root", Path("/dr")),
    (kubelet_plugin_options, {"IMEX_HOST_SOCKET_PATH": "/s.sock"}, "imex_host_socket_path", Path("/s.sock")),
    (kubelet_plugin_options, {"GPU_CLIQUE_LABEL_ENABLED": "true"}, "gpu_clique_label_enabled", True),
    (leader_election_options, {"LEADER_ELECTION_ENABLED": "true"}, "enabled", True),
    (
        leader_election_options,
        {"LEADER_ELECTION_LEASE_LOCK_NAMESPACE": "nvidia"},
        "lease_lock_namespace",
        "nvidia",
    ),
    (
        leader_election_options,
        {"LEADER_ELECTION_LEASE_LOCK_NAME": "imexdra-controller"},
        "lease_lock_name",
        "imexdra-controller",
    ),
    (
        leader_election_options,
        {"LEADER_ELECTION_LEASE_DURATION": "1m"},
        "lease_duration",
        timedelta(minutes=1),
    ),
    (
        leader_election_options,
        {"LEADER_ELECTION_RENEW_DEADLINE": "12s"},
        "renew_deadline",
        timedelta(seconds=12),
    ),
    (
        leader_election_options,
        {"LEADER_ELECTION_RETRY_PERIOD": "500ms"},
        "retry_period",
        timedelta(milliseconds=500),
    ),
    (
        kubelet_plugin_options,
        {"FABRIC_REGISTRATION_TIMEOUT": "90s"},
        "fabric_registration_timeout",
        timedelta(seconds=90),
    ),
    (daemon_options, {"CLIQUE_ID": "uuid.1"}, "clique_id", "uuid.1"),
    (daemon_options, {"COMPUTE_DOMAIN_UUID": "u"}, "compute_domain_uuid", "u"),
    (daemon_options, {"COMPUTE_DOMAIN_NAME": "cd"}, "compute_domain_name", "cd"),
    (daemon_options, {"COMPUTE_DOMAIN_NAMESPACE": "team"}, "compute_domain_namespace", "team"),
    (daemon_options, {"POD_IP": "10.1.2.3"}, "pod_ip", "10.1.2.3"),
    (daemon_options, {"POD_UID": "p-uid"}, "pod_uid", "p-uid"),
    (daemon_options, {"POD_NAME": "computedomain-daemon-x"}, "pod_name", "computedomain-daemon-x"),
    (daemon_options, {"POD_NAMESPACE": "nvidia"}, "pod_namespace", "nvidia"),
    (daemon_options, {"MAX_NODES_PER_IMEX_DOMAIN": "36"}, "max_nodes_per_imex_domain", 36),
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
        (kubelet_plugin_options, {"CDI_ROOT": "cdi"}, ["'--cdi-root'", "CDI_ROOT", "absolute"]),
        (
            kubelet_plugin_options,
            {"KUBELET_PLUGINS_DIRECTORY_PATH": "plugins"},
            ["'--kubelet-plugins-directory-path'", "absolute"],
        ),
        (kubelet_plugin_options, {"HEALTHCHECK_PORT": "70000"}, ["'--healthcheck-port'", "HEALTHCHECK_PORT"]),
        (kubelet_plugin_options, {"HEALTHCHECK_PORT": "-2"}, ["'--healthcheck-port'", "HEALTHCHECK_PORT"]),
        (controller_options, {}, ["Missing option '--pod-name'", "POD_NAME"]),
        (
            controller_options,
            {**CONTROLLER_ENV, "IMAGE_NAME": " "},
            ["'--image-name'", "IMAGE_NAME", "must not be empty"],
        ),
        (
            controller_options,
            {"POD_NAME": "p", "IMAGE_NAME": "i"},
            ["Missing option '--log-verbosity-cd-daemon'"],
        ),
        (
            controller_options,
            {**CONTROLLER_ENV, "MAX_NODES_PER_IMEX_DOMAIN": "0"},
            ["'--max-nodes-per-imex-domain'"],
        ),
        (
            controller_options,
            {**CONTROLLER_ENV, "ADDITIONAL_NAMESPACES": "ok,Not_OK"},
            ["'--additional-namespaces'", "Not_OK"],
        ),
        (
            leader_election_options,
            {"LEADER_ELECTION_LEASE_DURATION": "15"},
            ["'--leader-election-lease-duration'", "not a duration"],
        ),
        (
            leader_election_options,
            {"LEADER_ELECTION_RENEW_DEADLINE": "20s"},
            ["'--leader-election-lease-duration'", "renew deadline"],
        ),
        (
            leader_election_options,
            {"LEADER_ELECTION_RETRY_PERIOD": "9s"},
            ["'--leader-election-renew-deadline'", "1.2 x the retry"],
        ),
        (
            leader_election_options,
            {"LEADER_ELECTION_RETRY_PERIOD": "0s"},
            ["'--leader-election-retry-period'", "positive"],
        ),
        (daemon_options, {"POD_IP": "10.0.0"}, ["'--pod-ip'", "POD_IP", "not an IP address"]),
        (
            daemon_options,
            {"COMPUTE_DOMAIN_NAMESPACE": "Team"},
            ["'--compute-domain-namespace'", "DNS-1123 label"],
        ),
        (
            kubelet_plugin_options,
            {"NVIDIA_CDI_HOOK_PATH": "/usr/bin/nvidia-cdi-hook"},
            ["'--nvidia-cdi-hook-path'", "run no hooks", "Unset it (chart value nvidiaCDIHookPath)"],
        ),
        (
            kubelet_plugin_options,
            {"FABRIC_REGISTRATION_TIMEOUT": "-1s"},
            ["'--fabric-registration-timeout'", "must not be negative"],
        ),
    ],
    ids=[
        "cdi-root-relative",
        "plugins-dir-relative",
        "healthcheck-port-high",
        "healthcheck-port-low",
        "controller-pod-name-missing",
        "controller-image-blank",
        "controller-daemon-verbosity-missing",
        "controller-max-nodes-zero",
        "controller-additional-namespace-invalid",
        "lease-duration-not-go-duration",
        "lease-shorter-than-renew",
        "renew-too-close-to-retry",
        "retry-zero",
        "daemon-pod-ip-invalid",
        "daemon-namespace-invalid",
        "cdi-hook-path-set",
        "fabric-registration-timeout-negative",
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


def test_controller_settings_from_env() -> None:
    """The controller group reads its required variables and splits the list variables on commas."""
    settings = settings_of(
        controller_options,
        env={
            **CONTROLLER_ENV,
            "CD_DAEMON_IMAGE_PULL_SECRET_NAMES": " a, b ,,c ",
            "ADDITIONAL_NAMESPACES": "old-ns,other",
        },
    )
    assert settings.pod_name == "controller-0"
    assert settings.image_name == "registry/imexdra:1"
    assert settings.log_verbosity_cd_daemon == 4
    assert settings.max_nodes_per_imex_domain == 18
    assert settings.cd_daemon_image_pull_secret_names == ("a", "b", "c")
    assert settings.additional_namespaces == ("old-ns", "other")


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        ((), {}, True),
        (("--compute-domain-in-use-protection",), {}, True),
        (("--compute-domain-in-use-protection=false",), {}, False),
        (("--compute-domain-in-use-protection", "false"), {}, False),
        ((), {"COMPUTE_DOMAIN_IN_USE_PROTECTION": "false"}, False),
        ((), {"COMPUTE_DOMAIN_IN_USE_PROTECTION": "true"}, True),
    ],
    ids=["default-on", "bare-flag", "flag-equals-false", "flag-then-false", "env-false", "env-true"],
)
def test_in_use_protection_is_a_go_style_boolean(
    args: tuple[str, ...], env: dict[str, str], expected: bool
) -> None:
    """On by default; ``=false``, a following ``false`` or the variable turn it off (upstream's teardown)."""
    settings = settings_of(controller_options, args, env={**CONTROLLER_ENV, **env})
    assert settings.compute_domain_in_use_protection is expected


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        ((), {}, 0),
        (("--max-compute-domains-per-namespace=3",), {}, 3),
        ((), {"MAX_COMPUTE_DOMAINS_PER_NAMESPACE": "5"}, 5),
    ],
    ids=["default-unbounded", "flag", "env"],
)
def test_max_compute_domains_per_namespace(args: tuple[str, ...], env: dict[str, str], expected: int) -> None:
    """The per-namespace bound: 0 (none, upstream's behaviour) unless the flag or its variable sets one."""
    settings = settings_of(controller_options, args, env={**CONTROLLER_ENV, **env})
    assert settings.max_compute_domains_per_namespace == expected


def test_max_compute_domains_per_namespace_rejects_a_negative_bound() -> None:
    """A negative bound is a usage error naming the flag."""
    result, _ = invoke([controller_options], ["--max-compute-domains-per-namespace=-1"], env=CONTROLLER_ENV)
    assert result.exit_code == 2
    assert "--max-compute-domains-per-namespace" in result.output


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        ((), {}, True),
        (("--compute-domain-daemon-network-policy=false",), {}, False),
        ((), {"COMPUTE_DOMAIN_DAEMON_NETWORK_POLICY": "false"}, False),
    ],
    ids=["default-on", "flag-equals-false", "env-false"],
)
def test_daemon_network_policy_is_a_go_style_boolean(
    args: tuple[str, ...], env: dict[str, str], expected: bool
) -> None:
    """On by default (docs/tenancy.md, "Network"); ``=false`` or the variable turn it off, as upstream."""
    settings = settings_of(controller_options, args, env={**CONTROLLER_ENV, **env})
    assert settings.compute_domain_daemon_network_policy is expected


def test_in_use_protection_rejects_a_non_boolean() -> None:
    """A value that is no boolean is a usage error naming the flag."""
    result, _ = invoke([controller_options], ["--compute-domain-in-use-protection=maybe"], env=CONTROLLER_ENV)
    assert result.exit_code == 2
    assert "--compute-domain-in-use-protection" in result.output
