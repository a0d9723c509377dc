"""values.yaml, values.schema.json and the install-time guards, through the real ``helm``.

Typos and wrong types are rejected by the schema with helm's message naming the key; semantic
mistakes (upstream's guards and ours) fail rendering with a message that says what to do.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from imexdra.api.featuregates import ALIASES, GATES
from imexdra_sim.localcluster.binaries import KUBE_VERSION
from tests.support.paths import PYPROJECT
from tests.unit.chart.helm import CHART_DIR, helm, merge, nested, render, render_error

SCHEMA = json.loads((CHART_DIR / "values.schema.json").read_text())
#: Keys the schema accepts only so that upstream values files fail with a clear guard message.
SCHEMA_ONLY = {"nvidiaCtkPath", "consumableShares", "gpus", "init"}


def _uncovered(schema: dict[str, Any], node: yaml.Node, lines: list[str], path: str = "") -> list[str]:
    """Schema keys missing from values.yaml, extra keys, and keys without a comment line above them."""
    problems = []
    assert isinstance(node, yaml.MappingNode), path
    present = {key.value: (key, value) for key, value in node.value}
    properties = schema.get("properties", {})
    problems += [
        f"{path}{key}: missing from values.yaml" for key in set(properties) - set(present) - SCHEMA_ONLY
    ]
    problems += [f"{path}{key}: not in the schema" for key in set(present) - set(properties)]
    for key, (key_node, value_node) in present.items():
        sub = properties.get(key, {})
        if sub.get("properties"):
            problems += _uncovered(sub, value_node, lines, f"{path}{key}.")
        elif not lines[key_node.start_mark.line - 1].strip().startswith("#"):
            problems.append(f"{path}{key}: no comment above it")
    return problems


def test_values_yaml_matches_the_schema_and_is_commented() -> None:
    """values.yaml validates; it has every schema key and no other; each value has a comment above it."""
    text = (CHART_DIR / "values.yaml").read_text()
    jsonschema.Draft202012Validator(SCHEMA).validate(yaml.safe_load(text))
    tree = yaml.compose(text)
    assert tree is not None
    assert _uncovered(SCHEMA, tree, text.splitlines()) == []


def test_schema_knows_exactly_the_binaries_feature_gates() -> None:
    """featureGates accepts the gate names the binaries accept (deprecated alias included), no others."""
    accepted = set(SCHEMA["properties"]["featureGates"]["propertyNames"]["enum"])
    assert accepted == {gate.value for gate in GATES} | set(ALIASES)


def test_chart_app_version_is_the_package_version() -> None:
    """Chart appVersion (the default image tag) equals pyproject's version; the image default uses it."""
    chart = yaml.safe_load((CHART_DIR / "Chart.yaml").read_text())
    version = tomllib.loads(PYPROJECT.read_text())["project"]["version"]
    assert chart["appVersion"] == version
    container = render().container("Deployment", "compute-domain")
    assert container["image"] == f"imexdra:{version}"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        pytest.param(
            {"featureGate": {}}, "additional properties 'featureGate' not allowed", id="top-level-typo"
        ),
        pytest.param(
            nested("controller.leaderElection.enable", True),
            "additional properties 'enable' not allowed",
            id="nested-typo",
        ),
        pytest.param(
            nested("kubeletPlugin.containers.computeDomain.env", []),
            "additional properties 'computeDomain' not allowed",
            id="controller-key-under-plugin",
        ),
        pytest.param(
            {"featureGates": {"HostManagedImex": True}},
            "invalid propertyName 'HostManagedImex'",
            id="gate-typo",
        ),
        pytest.param(
            {"featureGates": {"HostManagedIMEX": "yes"}}, "got string, want boolean", id="gate-not-bool"
        ),
        pytest.param({"logVerbosity": "verbose"}, "does not match pattern", id="verbosity-word"),
        pytest.param({"logVerbosity": -1}, "minimum", id="verbosity-negative"),
        pytest.param(nested("image.pullPolicy", "Sometimes"), "value must be one of", id="pull-policy"),
        pytest.param(
            nested("resources.computeDomains.enabled", "yes"), "got string, want boolean", id="bool-as-string"
        ),
        pytest.param(
            nested("resources.computeDomains.imex.mode", "hostmanaged"), "value must be one of", id="mode"
        ),
        pytest.param(nested("controller.replicas", "2"), "got string, want integer", id="replicas-string"),
        pytest.param(
            nested("controller.leaderElection.leaseDuration", "15"), "does not match pattern", id="duration"
        ),
        pytest.param(
            nested("controller.metrics.httpEndpoint", "8080"), "does not match pattern", id="endpoint"
        ),
        pytest.param(nested("controller.kubeAPI.qps", 0), "exclusiveMinimum", id="qps-zero"),
        pytest.param(nested("controller.kubeAPI.burst", 0), "minimum", id="burst-zero"),
        pytest.param(
            nested("resources.computeDomains.maxPerNamespace", -1), "minimum", id="namespace-bound-negative"
        ),
        pytest.param(
            nested("resources.computeDomains.maxPerNamespace", "2"),
            "got string, want integer",
            id="namespace-bound-string",
        ),
        pytest.param(
            nested("kubeletPlugin.kubeletPluginsDirectoryPath", "plugins"), "does not match", id="relative"
        ),
        pytest.param(
            nested("kubeletPlugin.containers.computeDomains.healthcheckPort", 70000),
            "maximum",
            id="port-range",
        ),
        pytest.param({"imagePullSecrets": ["regcred"]}, "got string, want object", id="pull-secret-shape"),
        pytest.param(
            nested("controller.containers.computeDomain.env", [{"value": "x"}]),
            "missing property 'name'",
            id="env-without-name",
        ),
        pytest.param({"resourceApiVersion": "resource.k8s.io/v2"}, "value must be one of", id="api-version"),
    ],
)
def test_schema_rejects_typos_and_bad_types(values: dict[str, Any], message: str) -> None:
    """helm refuses the values before rendering, naming the offending key or value."""
    error = render_error(values)
    assert "don't meet the specifications of the schema" in error
    assert message in error


GUARDS = {
    "gpus-without-override": ({"resources": {"gpus": {"enabled": True}}}, "gpuResourcesEnabledOverride=true"),
    "gpus-with-override": (
        {"resources": {"gpus": {"enabled": True}}, "gpuResourcesEnabledOverride": True},
        "ships no GPU kubelet plugin",
    ),
    "deprecated-namespace-value": ({"namespace": "gpu-operator"}, "install with `--namespace gpu-operator`"),
    "obsolete-nvidiaCtkPath": ({"nvidiaCtkPath": "/usr/bin/nvidia-ctk"}, "nvidiaCtkPath is obsolete"),
    "webhook": ({"webhook": {"enabled": True}}, "this chart has no admission webhook"),
    "upstream-image": (
        nested("image.repository", "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu"),
        "is upstream's Go driver image",
    ),
    "upstream-image-old-name": (
        nested("image.repository", "nvcr.io/nvidia/k8s-dra-driver-gpu"),
        "Go driver image",
    ),
    "gpu-metrics-endpoint": (
        nested("kubeletPlugin.metrics.gpuHttpEndpoint", ":9090"),
        "this chart ships no GPU kubelet plugin",
    ),
    "host-mode-without-gate": (
        nested("resources.computeDomains.imex.mode", "hostManaged"),
        "requires featureGates.HostManagedIMEX=true",
    ),
    "host-mode-with-gate-off": (
        merge(
            nested("resources.computeDomains.imex.mode", "hostManaged"),
            {"featureGates": {"HostManagedIMEX": False}},
        ),
        "requires featureGates.HostManagedIMEX=true",
    ),
    "channel-isolation-driver-managed": (
        nested("resources.computeDomains.imex.isolation", "channel"),
        "isolation=channel needs host-managed IMEX: with driver-managed IMEX every ComputeDomain",
    ),
    "channel-isolation-driver-managed-gate-off": (
        merge(
            nested("resources.computeDomains.imex.isolation", "channel"),
            {"featureGates": {"AllAlpha": True, "HostManagedIMEX": False}},
        ),
        "isolation=channel needs host-managed IMEX",
    ),
    "unknown-isolation": (
        nested("resources.computeDomains.imex.isolation", "node"),
        'unknown resources.computeDomains.imex.isolation "node"',
    ),
    "conflicting-gate-spellings": (
        {"featureGates": {"HostManagedIMEX": True, "HostManagedIMEXDaemon": False}},
        "conflicts with featureGates.HostManagedIMEX=true",
    ),
    "cliques-without-dns-names": (
        {"featureGates": {"IMEXDaemonsWithDNSNames": False}},
        "ComputeDomainCliques requires IMEXDaemonsWithDNSNames",
    ),
    "gpu-sharing": (
        {"consumableShares": "4"},
        'consumableShares="4": GPU sharing belongs to upstream\'s GPU plugin',
    ),
    "init-container": (
        nested("kubeletPlugin.containers.init.resources", {"limits": {"cpu": "1"}}),
        "kubeletPlugin.containers.init: imexdra's kubelet plugin pod has no init container",
    ),
    "replicas-without-leader-election": (
        nested("controller.replicas", 2),
        "needs controller.leaderElection.enabled=true",
    ),
    "lease-name-in-env": (
        nested(
            "controller.containers.computeDomain.env",
            [{"name": "LEADER_ELECTION_LEASE_LOCK_NAME", "value": "x"}],
        ),
        "the chart names the Lease",
    ),
}


@pytest.mark.parametrize(("values", "message"), GUARDS.values(), ids=GUARDS.keys())
def test_install_guards(values: dict[str, Any], message: str) -> None:
    """Each guard fails rendering with its message."""
    error = render_error(values)
    assert "execution error" in error
    assert message in error


@pytest.mark.parametrize(
    "imex",
    [
        pytest.param({"isolation": "channel"}, id="by-gate"),
        pytest.param({"mode": "hostManaged", "isolation": "channel"}, id="by-mode"),
    ],
)
def test_channel_isolation_installs_with_host_managed_imex(imex: dict[str, str]) -> None:
    """Host-managed IMEX (either spelling) with isolation=channel renders, both binaries told so."""
    gates = {"HostManagedIMEX": True} if "mode" not in imex else {"HostManagedIMEXDaemon": True}
    rendered = render(merge(nested("resources.computeDomains.imex", imex), {"featureGates": gates}))
    for kind, container in (("Deployment", "compute-domain"), ("DaemonSet", "compute-domains")):
        assert rendered.env(kind, container)["IMEX_ISOLATION"] == "channel"


def test_default_namespace_is_refused_unless_allowed() -> None:
    """The release namespace ``default`` fails, unless allowDefaultNamespace=true."""
    assert "refusing to install into the `default` namespace" in render_error(namespace="default")
    assert render({"allowDefaultNamespace": True}, namespace="default").of_kind("Deployment")


def test_cluster_older_than_dra_v1_is_refused() -> None:
    """Kubernetes < 1.34 (no resource.k8s.io/v1, which the components speak) fails the install."""
    error = render_error(extra=("--kube-version=1.33.0",))
    assert "incompatible with Kubernetes v1.33.0" in error


def test_host_managed_tolerates_cliques_without_dns_names() -> None:
    """HostManagedIMEX forces both daemon gates off before the dependency check, as the binaries do."""
    values = {"featureGates": {"HostManagedIMEX": True, "IMEXDaemonsWithDNSNames": False}}
    assert render(values).of_kind("Deployment")


@pytest.mark.parametrize(
    "values",
    [
        pytest.param({}, id="defaults"),
        pytest.param({"featureGates": {"HostManagedIMEX": True}}, id="host-managed"),
        pytest.param(
            {
                "controller": {
                    "replicas": 2,
                    "leaderElection": {"enabled": True},
                    "networkPolicy": {"enabled": True},
                }
            },
            id="leader-election-and-policies",
        ),
        pytest.param({"featureGates": {"ComputeDomainCliques": False}}, id="cliques-off"),
    ],
)
def test_helm_lint_strict(values: dict[str, Any], tmp_path: Path) -> None:
    """``helm lint --strict`` passes for the main value sets."""
    values_file = tmp_path / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    result = helm(
        "lint",
        str(CHART_DIR),
        "--strict",
        "--namespace",
        "imexdra",
        f"--kube-version={KUBE_VERSION}",
        "-f",
        str(values_file),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout
