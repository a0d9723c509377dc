"""The objects the controller creates, field by field against upstream's (docs/compatibility.md §2.2)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from imexdra.api.constants import AllocationMode
from imexdra.api.flags.common import LogFormat
from imexdra.controller import render
from tests.unit.controller.support import UID, make_config, make_domain

DAEMON_NAME = f"computedomain-daemon-{UID}"
FINALIZERS = ["resource.nvidia.com/computeDomain"]


def claim_spec(request: str, device_class: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {
        "spec": {
            "devices": {
                "requests": [{"name": request, "exactly": {"deviceClassName": device_class}}],
                "config": [
                    {
                        "requests": [request],
                        "opaque": {"driver": "compute-domain.nvidia.com", "parameters": parameters},
                    }
                ],
            }
        }
    }


@pytest.mark.parametrize(
    ("mode", "written"),
    [(AllocationMode.SINGLE, "Single"), (AllocationMode.ALL, "All")],
    ids=["single", "all"],
)
def test_workload_claim_template_matches_upstream(mode: AllocationMode, written: str) -> None:
    """Name and namespace from the domain, CD and Workload labels, finalizer, ChannelConfig with the UID."""
    rct = render.workload_claim_template(make_domain(mode=mode))
    assert rct.to_dict() == {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": "cd-channel",
            "namespace": "team-a",
            "labels": {
                "resource.nvidia.com/computeDomain": UID,
                "resource.nvidia.com/computeDomainTarget": "Workload",
            },
            "finalizers": FINALIZERS,
        },
        "spec": claim_spec(
            "channel",
            "compute-domain-default-channel.nvidia.com",
            {
                "apiVersion": "resource.nvidia.com/v1beta1",
                "kind": "ComputeDomainChannelConfig",
                "domainID": UID,
                "allocationMode": written,
            },
        ),
    }


def test_daemon_claim_template_matches_upstream() -> None:
    """computedomain-daemon-<uid> in the driver namespace with a DaemonConfig carrying the UID."""
    rct = render.daemon_claim_template(UID, "nvidia-dra")
    assert rct.to_dict() == {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": DAEMON_NAME,
            "namespace": "nvidia-dra",
            "labels": {
                "resource.nvidia.com/computeDomain": UID,
                "resource.nvidia.com/computeDomainTarget": "Daemon",
            },
            "finalizers": FINALIZERS,
        },
        "spec": claim_spec(
            "daemon",
            "compute-domain-daemon.nvidia.com",
            {
                "apiVersion": "resource.nvidia.com/v1beta1",
                "kind": "ComputeDomainDaemonConfig",
                "domainID": UID,
            },
        ),
    }


def probe(period: int, failures: int, **extra: int) -> dict[str, Any]:
    return {
        "exec": {"command": ["compute-domain-daemon", "-v", "$(LOG_VERBOSITY)", "check"]},
        "periodSeconds": period,
        "timeoutSeconds": 10,
        "failureThreshold": failures,
        **extra,
    }


def field_env(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def test_daemon_set_matches_upstream() -> None:
    """Upstream's metadata, selectors, tolerations, claim, ndots 1 (#1465), command, env and probes;
    our securityContext."""
    config = make_config(cd_daemon_image_pull_secret_names=("regcred",))
    ds = render.daemon_set(UID, config).to_dict()
    label = {"resource.nvidia.com/computeDomain": UID}
    assert ds["metadata"] == {
        "name": DAEMON_NAME,
        "namespace": "nvidia-dra",
        "labels": label,
        "finalizers": FINALIZERS,
    }
    assert ds["spec"]["selector"] == {"matchLabels": label}
    assert ds["spec"]["template"]["metadata"] == {"labels": label}
    pod = ds["spec"]["template"]["spec"]
    container = pod.pop("containers")
    assert pod == {
        "serviceAccountName": "compute-domain-daemon-service-account",
        "imagePullSecrets": [{"name": "regcred"}],
        "nodeSelector": label,
        "tolerations": [
            {"operator": "Exists", "effect": "NoSchedule"},
            {"operator": "Exists", "effect": "NoExecute"},
            {"operator": "Exists", "effect": "PreferNoSchedule"},
        ],
        "resourceClaims": [{"name": "compute-domain-daemon", "resourceClaimTemplateName": DAEMON_NAME}],
        "dnsConfig": {"options": [{"name": "ndots", "value": "1"}]},
    }
    assert container == [
        {
            "name": "compute-domain-daemon",
            "image": "registry.example/imexdra:v1",
            "command": ["compute-domain-daemon", "-v", "$(LOG_VERBOSITY)", "run"],
            "env": [
                {"name": "LOG_VERBOSITY", "value": "4"},
                {"name": "MAX_NODES_PER_IMEX_DOMAIN", "value": "18"},
                field_env("NODE_NAME", "spec.nodeName"),
                field_env("POD_IP", "status.podIP"),
                field_env("POD_UID", "metadata.uid"),
                field_env("POD_NAME", "metadata.name"),
                field_env("POD_NAMESPACE", "metadata.namespace"),
                {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
                {"name": "FEATURE_GATES", "value": config.feature_gates.render()},
            ],
            "resources": {"claims": [{"name": "compute-domain-daemon"}]},
            "startupProbe": probe(1, 1200, initialDelaySeconds=0, successThreshold=1),
            "livenessProbe": probe(60, 20),
            "readinessProbe": probe(10, 1),
            "securityContext": {
                "privileged": False,
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
                "seccompProfile": {"type": "RuntimeDefault"},
            },
        }
    ]


def test_daemon_set_omits_pull_secrets_when_none_are_configured() -> None:
    """No imagePullSecrets key at all without configured secrets (upstream omits it)."""
    pod = render.daemon_set(UID, make_config()).to_dict()["spec"]["template"]["spec"]
    assert "imagePullSecrets" not in pod


def test_daemon_feature_gates_are_the_full_sorted_map_with_trailing_comma() -> None:
    """FEATURE_GATES in the daemon env is every gate, sorted, each followed by a comma."""
    env = {e.name: e.value for e in render.daemon_env(make_config(gates="MPSSupport=true"))}
    gates = env["FEATURE_GATES"]
    assert gates is not None and gates.endswith(",")
    pairs = gates.rstrip(",").split(",")
    assert pairs == sorted(pairs)
    assert "MPSSupport=true" in pairs and "ComputeDomainCliques=true" in pairs


@pytest.mark.parametrize("channel", [1, 7, 2047], ids=["first", "middle", "last-of-default-pool"])
def test_channel_isolation_template_selects_the_domains_channel(channel: int) -> None:
    """Channel isolation: the channel class and one CEL selector on the number; the rest as upstream's."""
    default = render.workload_claim_template(make_domain()).to_dict()
    rct = render.workload_claim_template(make_domain(), channel).to_dict()
    (request,) = rct["spec"]["spec"]["devices"]["requests"]
    assert request == {
        "name": "channel",
        "exactly": {
            "deviceClassName": "compute-domain-channel.nvidia.com",
            "selectors": [
                {"cel": {"expression": f'device.attributes["compute-domain.nvidia.com"].id == {channel}'}}
            ],
        },
    }
    assert rct["spec"]["spec"]["devices"]["config"] == default["spec"]["spec"]["devices"]["config"]
    assert rct["metadata"] == default["metadata"]


@pytest.mark.parametrize(("log_format", "expected"), [(LogFormat.TEXT, None), (LogFormat.JSON, "json")])
def test_daemons_log_in_the_controllers_format(log_format: LogFormat, expected: str | None) -> None:
    """JSON controller logs → LOGGING_FORMAT=json for the daemons; text (default) keeps upstream's env."""
    config = dataclasses.replace(make_config(), daemon_logging_format=log_format)
    env = {e.name: e.value for e in render.daemon_env(config)}
    assert env.get("LOGGING_FORMAT") == expected


@pytest.mark.parametrize(
    ("interval", "expected"), [(10.0, None), (2.5, "2.5"), (30.0, "30"), (0.0, "0")], ids=str
)
def test_daemons_poll_imex_peers_at_the_installs_interval(interval: float, expected: str | None) -> None:
    """``--cd-daemon-imex-peers-poll-interval`` reaches the daemons as IMEX_PEERS_POLL_INTERVAL; at the
    daemon's own default (10 s) the env stays upstream's."""
    env = {
        e.name: e.value for e in render.daemon_env(make_config(cd_daemon_imex_peers_poll_interval=interval))
    }
    assert env.get("IMEX_PEERS_POLL_INTERVAL") == expected
