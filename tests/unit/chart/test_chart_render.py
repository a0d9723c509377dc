"""What ``helm template`` renders: objects per install mode, DeviceClasses, env wiring, host paths.

Includes the chart checks for HostManagedIMEX (docs/host-managed.md) (default channel class present; daemon
class, daemon RBAC and ServiceAccount absent; FEATURE_GATES in controller and kubelet plugin), for
the gate, its deprecated alias, AllAlpha and upstream's ``imex.mode=hostManaged``.
"""

from __future__ import annotations

import tomllib
from typing import Any

import click
import pytest

from imexdra.api.constants import DEVICE_CLASS_DAEMON, DEVICE_CLASS_DEFAULT_CHANNEL
from imexdra.api.featuregates import resolve_feature_gates
from imexdra.api.imexmode import DRIVER_MANAGED_IMEX
from imexdra.controller import render as render_daemon
from imexdra.controller.config import ControllerConfig
from imexdra.controller.main import main as controller_main
from imexdra.kubeletplugin.main import main as plugin_main
from tests.support.paths import PYPROJECT
from tests.unit.chart.helm import NAMESPACE, merge, nested, render, render_error

CONTROLLER = ("Deployment", "compute-domain")
PLUGIN = ("DaemonSet", "compute-domains")
DAEMON_SA = "compute-domain-daemon-service-account"

# Upstream's exact selectors (docs/compatibility.md §2.2).
CHANNEL_CEL = (
    "device.driver == 'compute-domain.nvidia.com' && "
    "device.attributes['compute-domain.nvidia.com'].type == 'channel' && "
    "device.attributes['compute-domain.nvidia.com'].id == 0"
)
DAEMON_CEL = (
    "device.driver == 'compute-domain.nvidia.com' && "
    "device.attributes['compute-domain.nvidia.com'].type == 'daemon'"
)

HOST_MANAGED = {
    "gate": {"featureGates": {"HostManagedIMEX": True}},
    "deprecated-alias": {"featureGates": {"HostManagedIMEXDaemon": True}},
    "both-spellings": {"featureGates": {"HostManagedIMEX": True, "HostManagedIMEXDaemon": True}},
    "all-alpha": {"featureGates": {"AllAlpha": True}},
    "upstream-mode-value": merge(
        {"featureGates": {"HostManagedIMEXDaemon": True}},
        nested("resources.computeDomains.imex.mode", "hostManaged"),
    ),
}
DRIVER_MANAGED = {
    "defaults": {},
    "gate-off": {"featureGates": {"HostManagedIMEX": False}},
    "all-alpha-but-gate-off": {"featureGates": {"AllAlpha": True, "HostManagedIMEX": False}},
}


def _binary_envvars(command: click.Command) -> set[str]:
    names: set[str] = set()
    for param in command.params:
        envvar = getattr(param, "envvar", None)
        names |= {envvar} if isinstance(envvar, str) else set(envvar or ())
    return names


def _daemon_objects(rendered: Any) -> set[tuple[str, str]]:
    return {
        (kind, name)
        for kind, name in rendered.kinds()
        if name in (DAEMON_SA, DEVICE_CLASS_DAEMON) or "compute-domain-daemon" in name
    }


def test_defaults_render_the_compute_domain_driver() -> None:
    """Default values: controller, plugin, DeviceClasses, ServiceAccounts, RBAC, policies, tenant roles,
    the plugin's ingress NetworkPolicy."""
    rendered = render()
    assert rendered.kinds() == {
        ("Deployment", "imexdra-controller"),
        ("DaemonSet", "imexdra-kubelet-plugin"),
        ("DeviceClass", DEVICE_CLASS_DEFAULT_CHANNEL),
        ("DeviceClass", DEVICE_CLASS_DAEMON),
        ("ServiceAccount", "imexdra-service-account-controller"),
        ("ServiceAccount", "imexdra-service-account-kubeletplugin"),
        ("ServiceAccount", DAEMON_SA),
        ("ClusterRole", "imexdra-controller"),
        ("ClusterRoleBinding", "imexdra-controller"),
        ("Role", "imexdra-controller"),
        ("RoleBinding", "imexdra-controller"),
        ("ClusterRole", "imexdra-kubeletplugin"),
        ("ClusterRoleBinding", "imexdra-kubeletplugin"),
        ("Role", "imexdra-kubeletplugin"),
        ("RoleBinding", "imexdra-kubeletplugin"),
        ("Role", "imexdra-compute-domain-daemon"),
        ("RoleBinding", "imexdra-compute-domain-daemon"),
        ("ValidatingAdmissionPolicy", "imexdra-kubeletplugin-own-node"),
        ("ValidatingAdmissionPolicyBinding", "imexdra-kubeletplugin-own-node"),
        ("ValidatingAdmissionPolicy", "imexdra-compute-domain-daemon-own-pod"),
        ("ValidatingAdmissionPolicyBinding", "imexdra-compute-domain-daemon-own-pod"),
        ("ValidatingAdmissionPolicy", "imexdra-tenant-resourceclaims"),
        ("ValidatingAdmissionPolicyBinding", "imexdra-tenant-resourceclaims"),
        ("ValidatingAdmissionPolicy", "imexdra-tenant-resourceclaimtemplates"),
        ("ValidatingAdmissionPolicyBinding", "imexdra-tenant-resourceclaimtemplates"),
        ("ClusterRole", "imexdra-computedomains-edit"),
        ("ClusterRole", "imexdra-computedomains-view"),
        ("NetworkPolicy", "imexdra-kubelet-plugin-ingress"),
    }
    namespaced = [obj for obj in rendered.objects if obj["kind"] in ("Deployment", "DaemonSet", "Role")]
    assert {obj["metadata"]["namespace"] for obj in namespaced} == {NAMESPACE}


def test_device_classes_carry_upstreams_exact_selectors() -> None:
    """Both DeviceClasses: resource.k8s.io/v1 on a 1.36 cluster, one CEL selector each, upstream's text."""
    rendered = render()
    for name, cel in ((DEVICE_CLASS_DEFAULT_CHANNEL, CHANNEL_CEL), (DEVICE_CLASS_DAEMON, DAEMON_CEL)):
        device_class = rendered.get("DeviceClass", name)
        assert device_class["apiVersion"] == "resource.k8s.io/v1"
        assert device_class["spec"] == {"selectors": [{"cel": {"expression": cel}}]}


@pytest.mark.parametrize(
    ("api_versions", "expected"),
    [
        pytest.param((), "resource.k8s.io/v1", id="helm-defaults-include-v1"),
        pytest.param(
            ("--set", "resourceApiVersion=resource.k8s.io/v1beta2"), "resource.k8s.io/v1beta2", id="pinned"
        ),
    ],
)
def test_device_class_api_version(api_versions: tuple[str, ...], expected: str) -> None:
    """resourceApiVersion pins the DeviceClass apiVersion; unset picks the newest the cluster serves."""
    rendered = render(extra=api_versions)
    assert {dc["apiVersion"] for dc in rendered.of_kind("DeviceClass")} == {expected}


@pytest.mark.parametrize("values", HOST_MANAGED.values(), ids=HOST_MANAGED.keys())
def test_host_managed_imex_drops_daemon_objects(values: dict[str, Any]) -> None:
    """Host-managed: channel class kept, daemon class and daemon SA/RBAC gone, FEATURE_GATES wired."""
    rendered = render(values)
    assert ("DeviceClass", DEVICE_CLASS_DEFAULT_CHANNEL) in rendered.kinds()
    assert _daemon_objects(rendered) == set()
    assert not [obj for obj in rendered.of_kind("Role") if obj["metadata"]["name"] == "imexdra-controller"]
    expected_gates = "".join(f"{k}={str(v).lower()}," for k, v in sorted(values["featureGates"].items()))
    for kind, container in (CONTROLLER, PLUGIN):
        assert rendered.env(kind, container)["FEATURE_GATES"] == expected_gates


@pytest.mark.parametrize("values", DRIVER_MANAGED.values(), ids=DRIVER_MANAGED.keys())
def test_driver_managed_keeps_daemon_objects(values: dict[str, Any]) -> None:
    """Without host-managed IMEX the daemon DeviceClass, ServiceAccount, RBAC and policy are rendered."""
    assert _daemon_objects(render(values)) == {
        ("DeviceClass", DEVICE_CLASS_DAEMON),
        ("ServiceAccount", DAEMON_SA),
        ("Role", "imexdra-compute-domain-daemon"),
        ("RoleBinding", "imexdra-compute-domain-daemon"),
        ("ValidatingAdmissionPolicy", "imexdra-compute-domain-daemon-own-pod"),
        ("ValidatingAdmissionPolicyBinding", "imexdra-compute-domain-daemon-own-pod"),
    }


def test_feature_gates_absent_when_none_are_set() -> None:
    """No featureGates, no FEATURE_GATES variable (the binaries then use their defaults)."""
    rendered = render()
    for kind, container in (CONTROLLER, PLUGIN):
        assert "FEATURE_GATES" not in rendered.env(kind, container)


def test_feature_gates_render_sorted_with_trailing_comma() -> None:
    """FEATURE_GATES is upstream's format: gates in name order, ``Name=value,`` each."""
    gates = {"MPSSupport": False, "ComputeDomainCliques": True, "CrashOnNVLinkFabricErrors": False}
    env = render({"featureGates": gates}).env(*CONTROLLER)
    assert (
        env["FEATURE_GATES"] == "ComputeDomainCliques=true,CrashOnNVLinkFabricErrors=false,MPSSupport=false,"
    )


@pytest.mark.parametrize(("kind", "container"), [CONTROLLER, PLUGIN], ids=["controller", "kubelet-plugin"])
def test_every_env_variable_is_one_the_binary_reads(kind: str, container: str) -> None:
    """Each variable the chart sets is read by the binary's flags, except $(POD_IP) and the runtime hint."""
    command = controller_main if kind == "Deployment" else plugin_main
    everything_on = {
        "featureGates": {"MPSSupport": False},
        "imagePullSecrets": [{"name": "pull"}],
        "altProcDevices": "/srv/proc-devices",
        "controller": {"replicas": 2, "leaderElection": {"enabled": True}},
    }
    env = render(everything_on).env(kind, container)
    helpers = {"POD_IP", "NVIDIA_VISIBLE_DEVICES"}
    assert set(env) - helpers <= _binary_envvars(command)


@pytest.mark.parametrize(("value", "expected"), [(None, "true"), (True, "true"), (False, "false")])
def test_in_use_protection_reaches_the_controller(value: bool | None, expected: str) -> None:
    """inUseProtection is COMPUTE_DOMAIN_IN_USE_PROTECTION; a values set without the key keeps it on
    (what ``helm upgrade --reuse-values`` from a release before the key passes)."""
    values = nested("resources.computeDomains.inUseProtection", value)
    assert render(values).env(*CONTROLLER)["COMPUTE_DOMAIN_IN_USE_PROTECTION"] == expected


@pytest.mark.parametrize(("value", "expected"), [(None, "true"), (True, "true"), (False, "false")])
def test_daemon_network_policy_reaches_the_controller(value: bool | None, expected: str) -> None:
    """daemonNetworkPolicy is COMPUTE_DOMAIN_DAEMON_NETWORK_POLICY, on without the key (--reuse-values)."""
    values = nested("resources.computeDomains.daemonNetworkPolicy", value)
    assert render(values).env(*CONTROLLER)["COMPUTE_DOMAIN_DAEMON_NETWORK_POLICY"] == expected


@pytest.mark.parametrize(("value", "expected"), [(None, None), (10, "10"), (2.5, "2.5"), (0, "0")])
def test_imex_peers_poll_interval_reaches_the_controller(value: float | None, expected: str | None) -> None:
    """imex.peersPollIntervalSeconds is CD_DAEMON_IMEX_PEERS_POLL_INTERVAL (0 included: reports off);
    without the key (--reuse-values from an older release) it is left out and the binary's default holds."""
    values = nested("resources.computeDomains.imex.peersPollIntervalSeconds", value)
    assert render(values).env(*CONTROLLER).get("CD_DAEMON_IMEX_PEERS_POLL_INTERVAL") == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [(None, "0"), (0, "0"), (3, "3"), (2047, "2047")],
    ids=["key-absent", "default-unbounded", "three", "large"],
)
def test_namespace_bound_reaches_the_controller(value: int | None, expected: str) -> None:
    """maxPerNamespace is MAX_COMPUTE_DOMAINS_PER_NAMESPACE as a plain integer; a values set without
    the key (``helm upgrade --reuse-values`` from a release before it) gives 0, no bound."""
    values = nested("resources.computeDomains.maxPerNamespace", value)
    assert render(values).env(*CONTROLLER)["MAX_COMPUTE_DOMAINS_PER_NAMESPACE"] == expected


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param({}, ("20", "40"), id="chart-default"),
        pytest.param(nested("controller.kubeAPI", None), (None, None), id="key-absent-binary-default"),
    ],
)
def test_controller_client_rate_limit(
    values: dict[str, Any], expected: tuple[str | None, str | None]
) -> None:
    """The chart gives the controller 20/40 (values.yaml says why); a values set without the key (an
    upgrade with ``--reuse-values`` from a release before it) leaves the binary's upstream 5/10."""
    env = render(values).env(*CONTROLLER)
    assert (env.get("KUBE_API_QPS"), env.get("KUBE_API_BURST")) == expected


def test_controller_env_wiring() -> None:
    """The controller gets upstream's variables from values and the downward API."""
    values = {
        "logVerbosity": 6,
        "image": {"repository": "registry.example/imexdra", "tag": "1.2.3"},
        "imagePullSecrets": [{"name": "a"}, {"name": "b"}],
        "resources": {"computeDomains": {"imex": {"mode": "driverManaged", "isolation": "domain"}}},
        "controller": {
            "replicas": 2,
            "leaderElection": {
                "enabled": True,
                "leaseDuration": "30s",
                "renewDeadline": "20s",
                "retryPeriod": "5s",
            },
            "metrics": {"httpEndpoint": "$(POD_IP):9090", "metricsPath": "/m"},
            "kubeAPI": {"qps": 12.5, "burst": 25},
        },
    }
    rendered = render(values)
    env = rendered.env(*CONTROLLER)
    assert env == {
        "POD_NAME": {"fieldRef": {"fieldPath": "metadata.name"}},
        "POD_IP": {"fieldRef": {"fieldPath": "status.podIP"}},
        "NAMESPACE": {"fieldRef": {"fieldPath": "metadata.namespace"}},
        "LOG_VERBOSITY": "6",
        "LOG_VERBOSITY_CD_DAEMON": "6",
        "IMAGE_NAME": "registry.example/imexdra:1.2.3",
        "NVIDIA_VISIBLE_DEVICES": "void",
        "IMEX_MODE": "driverManaged",
        "IMEX_ISOLATION": "domain",
        "IMEX_CHANNEL_COUNT": "2048",
        "COMPUTE_DOMAIN_IN_USE_PROTECTION": "true",
        "MAX_COMPUTE_DOMAINS_PER_NAMESPACE": "0",
        "COMPUTE_DOMAIN_DAEMON_NETWORK_POLICY": "true",
        "CD_DAEMON_IMEX_PEERS_POLL_INTERVAL": "10",
        "CD_DAEMON_IMAGE_PULL_SECRET_NAMES": "a,b",
        "HTTP_ENDPOINT": "$(POD_IP):9090",
        "METRICS_PATH": "/m",
        "PPROF_PATH": "",
        "KUBE_API_QPS": "12.5",
        "KUBE_API_BURST": "25",
        "LEADER_ELECTION_ENABLED": "true",
        "LEADER_ELECTION_LEASE_LOCK_NAME": "imexdra-controller",
        "LEADER_ELECTION_LEASE_LOCK_NAMESPACE": NAMESPACE,
        "LEADER_ELECTION_LEASE_DURATION": "30s",
        "LEADER_ELECTION_RENEW_DEADLINE": "20s",
        "LEADER_ELECTION_RETRY_PERIOD": "5s",
    }
    names = [e["name"] for e in rendered.container(*CONTROLLER)["env"]]
    assert names.index("POD_IP") < names.index("HTTP_ENDPOINT"), "$(POD_IP) must be defined before use"
    container = rendered.container(*CONTROLLER)
    assert container["image"] == "registry.example/imexdra:1.2.3"
    assert container["command"] == ["compute-domain-controller"]
    assert container["ports"] == [{"name": "metrics", "containerPort": 9090, "protocol": "TCP"}]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    deployment = rendered.of_kind("Deployment")[0]
    assert deployment["spec"]["replicas"] == 2
    assert (
        deployment["spec"]["template"]["spec"]["serviceAccountName"] == "imexdra-service-account-controller"
    )


def test_profile_path_reaches_the_controller() -> None:
    """controller.metrics.profilePath is passed as PPROF_PATH (upstream's variable), not refused."""
    env = render(nested("controller.metrics.profilePath", "/debug/pprof")).env(*CONTROLLER)
    assert env["PPROF_PATH"] == "/debug/pprof"


@pytest.mark.parametrize("path", ["debug/pprof", "/", "//"])
def test_profile_path_must_be_an_absolute_prefix(path: str) -> None:
    """A relative path or "/" alone (which would hide /metrics and the probes) is refused by the schema."""
    assert "profilePath" in render_error(nested("controller.metrics.profilePath", path))


def test_metrics_disabled_drops_endpoint_port_and_probe() -> None:
    """controller.metrics.enabled=false: no HTTP_ENDPOINT, no port, no liveness probe."""
    container = render({"controller": {"metrics": {"enabled": False}}}).container(*CONTROLLER)
    assert "HTTP_ENDPOINT" not in {e["name"] for e in container["env"]}
    assert "ports" not in container
    assert "livenessProbe" not in container


def test_kubelet_plugin_env_wiring_and_host_paths() -> None:
    """The plugin gets its paths, IMEX settings and node identity; host paths follow the values."""
    values = {
        "nvidiaDriverRoot": "/run/nvidia/driver",
        "altProcDevices": "/srv/imexdra-test/proc-devices",
        "featureGates": {"HostManagedIMEX": True},
        "kubeletPlugin": {
            "kubeletRegistrarDirectoryPath": "/var/lib/k/plugins_registry",
            "kubeletPluginsDirectoryPath": "/var/lib/k/plugins",
            "metrics": {"computeDomainHttpEndpoint": "$(POD_IP):8081"},
            "containers": {"computeDomains": {"healthcheckPort": 0, "gpuCliqueLabelEnabled": True}},
        },
    }
    rendered = render(values)
    env = rendered.env(*PLUGIN)
    assert env == {
        "POD_IP": {"fieldRef": {"fieldPath": "status.podIP"}},
        "NODE_NAME": {"fieldRef": {"fieldPath": "spec.nodeName"}},
        "NAMESPACE": {"fieldRef": {"fieldPath": "metadata.namespace"}},
        "LOG_VERBOSITY": "4",
        "NVIDIA_DRIVER_ROOT": "/run/nvidia/driver",
        "NVIDIA_VISIBLE_DEVICES": "void",
        "CDI_ROOT": "/var/run/cdi",
        "IMEX_MODE": "driverManaged",
        "IMEX_ISOLATION": "domain",
        "IMEX_CHANNEL_COUNT": "2048",
        "IMEX_HOST_SOCKET_PATH": "/etc/nvidia-imex/imex_ctrl.sock",
        "KUBELET_REGISTRAR_DIRECTORY_PATH": "/var/lib/k/plugins_registry",
        "KUBELET_PLUGINS_DIRECTORY_PATH": "/var/lib/k/plugins",
        "GPU_CLIQUE_LABEL_ENABLED": "true",
        "HTTP_ENDPOINT": "$(POD_IP):8081",
        "METRICS_PATH": "/metrics",
        "ALT_PROC_DEVICES_PATH": "/alt-proc-devices",
        "FEATURE_GATES": "HostManagedIMEX=true,",
        "HEALTHCHECK_PORT": "0",
    }
    pod = rendered.of_kind("DaemonSet")[0]["spec"]["template"]["spec"]
    host_paths = {v["name"]: (v["hostPath"]["path"], v["hostPath"]["type"]) for v in pod["volumes"]}
    assert host_paths == {
        "plugins-registry": ("/var/lib/k/plugins_registry", "DirectoryOrCreate"),
        "plugins": ("/var/lib/k/plugins", "DirectoryOrCreate"),
        "cdi": ("/var/run/cdi", "DirectoryOrCreate"),
        "driver-root": ("/run/nvidia/driver", "Directory"),
        "host-imex-socket-dir": ("/etc/nvidia-imex", "DirectoryOrCreate"),
        "alt-proc-devices": ("/srv/imexdra-test/proc-devices", "File"),
    }
    container = rendered.container(*PLUGIN)
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["plugins-registry"]["mountPath"] == "/var/lib/k/plugins_registry"
    assert mounts["plugins"] == {
        "name": "plugins",
        "mountPath": "/var/lib/k/plugins",
        "mountPropagation": "Bidirectional",
    }
    assert (
        mounts["driver-root"]["readOnly"] and mounts["alt-proc-devices"]["mountPath"] == "/alt-proc-devices"
    )
    assert mounts["host-imex-socket-dir"] == {
        "name": "host-imex-socket-dir",
        "mountPath": "/etc/nvidia-imex",
        "readOnly": True,
    }
    assert container["securityContext"] == {"privileged": True}
    assert "startupProbe" not in container, "a random health port (0) cannot be probed"
    assert pod["serviceAccountName"] == "imexdra-service-account-kubeletplugin"


@pytest.mark.parametrize(
    ("values", "mounted"),
    [
        ({}, None),
        ({"featureGates": {"HostManagedIMEX": True}}, "/etc/nvidia-imex"),
        (
            {
                "featureGates": {"HostManagedIMEX": True},
                "resources": {"computeDomains": {"imex": {"hostSocketPath": "/run/imex/ctl/imex.sock"}}},
            },
            "/run/imex/ctl",
        ),
    ],
    ids=["driver-managed", "host-managed-default", "host-managed-custom-socket"],
)
def test_kubelet_plugin_mounts_the_host_imex_socket_directory_when_host_managed(
    values: dict[str, Any], mounted: str | None
) -> None:
    """Host-managed: the socket's directory, at the same path, read-only; driver-managed: nothing."""
    rendered = render(values)
    pod = rendered.of_kind("DaemonSet")[0]["spec"]["template"]["spec"]
    volumes = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in rendered.container(*PLUGIN)["volumeMounts"]}
    assert volumes.get("host-imex-socket-dir") == mounted
    assert mounts.get("host-imex-socket-dir") == mounted


def test_a_cdi_hook_path_is_refused_with_the_reason() -> None:
    """imexdra writes no CDI hooks: a hook path would be silently unused, so the install fails instead."""
    error = render_error({"nvidiaCDIHookPath": "/usr/local/nvidia/toolkit/nvidia-cdi-hook"})
    assert 'nvidiaCDIHookPath="/usr/local/nvidia/toolkit/nvidia-cdi-hook" is not used' in error
    assert "run no hooks" in error and "Remove the value" in error


def test_host_imex_socket_directly_under_root_is_refused() -> None:
    """A socket directly under / would mount the host's whole root into the plugin: refused."""
    error = render_error(
        {
            "featureGates": {"HostManagedIMEX": True},
            "resources": {"computeDomains": {"imex": {"hostSocketPath": "/imex.sock"}}},
        }
    )
    assert "hostSocketPath must not be directly under /" in error


def test_kubelet_plugin_probes_use_a_fixed_health_port() -> None:
    """healthcheckPort > 0: gRPC startup and liveness probes on service ``liveness``, as upstream."""
    container = render().container(*PLUGIN)
    for probe in ("startupProbe", "livenessProbe"):
        assert container[probe]["grpc"] == {"port": 51515, "service": "liveness"}
    assert "ALT_PROC_DEVICES_PATH" not in render().env(*PLUGIN)


def test_user_env_replaces_chart_entries_and_extra_volumes_are_added() -> None:
    """Per-component env overrides same-named chart entries; extra volumes and mounts are passed through."""
    kubeconfig = {"name": "kubeconfig", "secret": {"secretName": "kc"}}
    mount = {"name": "kubeconfig", "mountPath": "/etc/kubeconfig", "readOnly": True}
    component = {
        "containers": {
            "X": {"env": [{"name": "LOG_VERBOSITY", "value": "9"}, {"name": "KUBECONFIG", "value": "/k"}]}
        }
    }
    values: dict[str, Any] = {}
    for key, container in (("controller", "computeDomain"), ("kubeletPlugin", "computeDomains")):
        values[key] = {
            "containers": {container: {**component["containers"]["X"], "extraVolumeMounts": [mount]}},
            "extraVolumes": [kubeconfig],
        }
    rendered = render(values)
    for kind, container_name in (CONTROLLER, PLUGIN):
        env = rendered.env(kind, container_name)
        assert env["LOG_VERBOSITY"] == "9" and env["KUBECONFIG"] == "/k"
        assert mount in rendered.container(kind, container_name)["volumeMounts"]
        (workload,) = rendered.of_kind(kind)
        assert kubeconfig in workload["spec"]["template"]["spec"]["volumes"]


def test_additional_namespaces_get_daemon_accounts_and_controller_roles() -> None:
    """ADDITIONAL_NAMESPACES (commas or spaces, de-duplicated) extends the namespaces with daemon RBAC."""
    env = [{"name": "ADDITIONAL_NAMESPACES", "value": "legacy-a, legacy-b legacy-a,"}]
    rendered = render({"controller": {"containers": {"computeDomain": {"env": env}}}})
    daemon_accounts = {
        obj["metadata"]["namespace"]
        for obj in rendered.of_kind("ServiceAccount")
        if obj["metadata"]["name"] == DAEMON_SA
    }
    assert daemon_accounts == {NAMESPACE, "legacy-a", "legacy-b"}
    controller_roles = {
        obj["metadata"]["namespace"]
        for obj in rendered.of_kind("Role")
        if obj["metadata"]["name"] == "imexdra-controller"
    }
    assert controller_roles == {NAMESPACE, "legacy-a", "legacy-b"}


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param({}, "imexdra", id="release-contains-chart-name"),
        pytest.param({"fullnameOverride": "cd-driver"}, "cd-driver", id="fullnameOverride"),
        pytest.param(
            {"nameOverride": "dra-driver-nvidia-gpu"}, "imexdra-dra-driver-nvidia-gpu", id="nameOverride"
        ),
    ],
)
def test_object_names_follow_the_release(values: dict[str, Any], expected: str) -> None:
    """Object names use the full name; nameOverride also renames the upstream-style component label."""
    rendered = render(values)
    deployment = rendered.of_kind("Deployment")[0]
    assert deployment["metadata"]["name"] == f"{expected}-controller"
    label = f"{values.get('nameOverride', 'imexdra')}-component"
    assert deployment["spec"]["selector"]["matchLabels"][label] == "controller"
    assert deployment["spec"]["template"]["metadata"]["labels"][label] == "controller"


def test_service_account_create_false_renders_no_component_accounts() -> None:
    """serviceAccount.create=false: no controller/plugin accounts or RBAC; workloads still name them."""
    rendered = render({"serviceAccount": {"create": False, "name": "mine"}})
    assert not [obj for obj in rendered.of_kind("ServiceAccount") if obj["metadata"]["name"] != DAEMON_SA]
    assert not [obj for obj in rendered.of_kind("ClusterRole") if "controller" in obj["metadata"]["name"]]
    assert (
        rendered.of_kind("Deployment")[0]["spec"]["template"]["spec"]["serviceAccountName"]
        == "mine-controller"
    )


def test_compute_domains_disabled_renders_nothing() -> None:
    """resources.computeDomains.enabled=false: no object at all (the CRDs come from crds/ regardless)."""
    assert render({"resources": {"computeDomains": {"enabled": False}}}).objects == ()


def test_network_policies_when_enabled() -> None:
    """networkPolicy.enabled renders egress-only policies selecting each component's pods."""
    rendered = render(
        {
            "controller": {"networkPolicy": {"enabled": True}},
            "kubeletPlugin": {"networkPolicy": {"enabled": True}, "ingressNetworkPolicy": {"enabled": False}},
        }
    )
    policies = {p["metadata"]["name"]: p["spec"] for p in rendered.of_kind("NetworkPolicy")}
    assert set(policies) == {"imexdra-controller", "imexdra-kubelet-plugin"}
    for name, spec in policies.items():
        component = name.removeprefix("imexdra-")
        assert spec["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == component
        assert spec["policyTypes"] == ["Egress"]


PLUGIN_INGRESS = "imexdra-kubelet-plugin-ingress"


@pytest.mark.parametrize(
    ("values", "ingress"),
    [
        pytest.param({}, [{"ports": [{"protocol": "TCP", "port": 8081}]}], id="default-metrics-only"),
        pytest.param(
            nested("kubeletPlugin.metrics.computeDomainHttpEndpoint", "$(POD_IP):9400"),
            [{"ports": [{"protocol": "TCP", "port": 9400}]}],
            id="metrics-elsewhere",
        ),
        pytest.param(nested("kubeletPlugin.metrics.enabled", False), [], id="no-metrics-nothing"),
        pytest.param(
            nested("kubeletPlugin.ingressNetworkPolicy", None),
            [{"ports": [{"protocol": "TCP", "port": 8081}]}],
            id="key-absent-on",
        ),
    ],
)
def test_plugin_ingress_policy_opens_the_metrics_port_only(
    values: dict[str, Any], ingress: list[Any]
) -> None:
    """Plugin pods take ingress on the metrics port alone; the health port is the kubelet's (node-local)."""
    policies = {p["metadata"]["name"]: p["spec"] for p in render(values).of_kind("NetworkPolicy")}
    assert set(policies) == {PLUGIN_INGRESS}
    spec = policies[PLUGIN_INGRESS]
    assert spec["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "kubelet-plugin"
    assert spec["policyTypes"] == ["Ingress"]
    assert spec["ingress"] == ingress


def test_plugin_ingress_policy_can_be_turned_off() -> None:
    """ingressNetworkPolicy.enabled=false renders no policy at all (upstream's default set)."""
    assert render(nested("kubeletPlugin.ingressNetworkPolicy.enabled", False)).of_kind("NetworkPolicy") == []


def test_commands_and_daemon_account_match_the_package() -> None:
    """The chart runs the package's console scripts; its daemon account is the one the controller renders."""
    scripts = set(tomllib.loads(PYPROJECT.read_text())["project"]["scripts"])
    rendered = render()
    for kind, container in (CONTROLLER, PLUGIN):
        assert rendered.container(kind, container)["command"][0] in scripts
    config = ControllerConfig(
        driver_namespace=NAMESPACE,
        managed_namespaces=(NAMESPACE,),
        pod_name="controller-0",
        image_name="imexdra:test",
        image_pull_secrets=(),
        daemon_log_verbosity=0,
        max_nodes_per_imex_domain=18,
        feature_gates=resolve_feature_gates(""),
        imex_mode=DRIVER_MANAGED_IMEX,
    )
    daemons = render_daemon.daemon_set("0000-uid", config)
    assert daemons.spec is not None and daemons.spec.template.spec is not None
    pod = daemons.spec.template.spec
    assert pod.containers[0].command is not None and pod.containers[0].command[0] in scripts
    assert pod.serviceAccountName == DAEMON_SA


def test_a_digest_pins_every_image_the_install_runs() -> None:
    """image.digest pins repository:tag@digest for the controller, the plugin and the daemons (IMAGE_NAME)."""
    digest = "sha256:" + "ab" * 32
    values = {"image": {"repository": "registry.example/team/imexdra", "tag": "0.1.0", "digest": digest}}
    rendered = render(values)
    pinned = f"registry.example/team/imexdra:0.1.0@{digest}"
    assert rendered.container(*CONTROLLER)["image"] == pinned
    assert rendered.env(*CONTROLLER)["IMAGE_NAME"] == pinned
    (plugin,) = rendered.of_kind("DaemonSet")
    assert {c["image"] for c in plugin["spec"]["template"]["spec"]["containers"]} == {pinned}


@pytest.mark.parametrize("digest", ["sha256:abc", "latest", "sha512:" + "ab" * 64])
def test_a_malformed_digest_is_refused(digest: str) -> None:
    """The schema names the field; nothing is rendered with a reference no runtime can pull."""
    assert "digest" in render_error({"image": {"digest": digest}})
