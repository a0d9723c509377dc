"""Shared names: the strings a cluster that ran upstream already carries must stay verbatim."""

import pytest

from imexdra.api import constants

UPSTREAM = [
    ("DRIVER_NAME", "compute-domain.nvidia.com"),
    ("API_VERSION", "resource.nvidia.com/v1beta1"),
    ("CRD_COMPUTE_DOMAINS", "computedomains.resource.nvidia.com"),
    ("CRD_COMPUTE_DOMAIN_CLIQUES", "computedomaincliques.resource.nvidia.com"),
    ("COMPUTE_DOMAIN_FINALIZER", "resource.nvidia.com/computeDomain"),
    ("COMPUTE_DOMAIN_LABEL_KEY", "resource.nvidia.com/computeDomain"),
    ("NODE_LABEL_KEY", "resource.nvidia.com/computeDomain"),
    ("CLIQUE_LABEL_KEY", "resource.nvidia.com/computeDomain.cliqueID"),
    ("TARGET_LABEL_KEY", "resource.nvidia.com/computeDomainTarget"),
    ("GPU_CLIQUE_NODE_LABEL_KEY", "nvidia.com/gpu.clique"),
    ("DEVICE_CLASS_DEFAULT_CHANNEL", "compute-domain-default-channel.nvidia.com"),
    ("DEVICE_CLASS_DAEMON", "compute-domain-daemon.nvidia.com"),
    ("QUALIFIED_DEVICE_ATTRIBUTE_TYPE", "compute-domain.nvidia.com/type"),
    ("QUALIFIED_DEVICE_ATTRIBUTE_ID", "compute-domain.nvidia.com/id"),
    ("DEFAULT_MAX_NODES_PER_IMEX_DOMAIN", 18),
]


@pytest.mark.parametrize(("name", "value"), UPSTREAM, ids=[name for name, _ in UPSTREAM])
def test_upstream_strings(name: str, value: object) -> None:
    """Each shared name has upstream's exact value."""
    assert getattr(constants, name) == value


@pytest.mark.parametrize(
    ("enum", "values"),
    [
        (constants.AllocationMode, ["Single", "All"]),
        (constants.ComputeDomainStatusValue, ["Ready", "NotReady"]),
        (constants.ClaimTemplateTarget, ["Daemon", "Workload"]),
        (constants.DeviceType, ["channel", "daemon"]),
    ],
    ids=["allocation-mode", "status", "target", "device-type"],
)
def test_enum_values(enum: type, values: list[str]) -> None:
    """Wire enums carry upstream's spellings."""
    assert [member.value for member in enum] == values  # type: ignore[attr-defined]


def test_daemon_object_name() -> None:
    """The daemon DaemonSet and its claim template are named after the ComputeDomain UID."""
    assert constants.daemon_object_name("1234-abcd") == "computedomain-daemon-1234-abcd"
