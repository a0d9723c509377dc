"""Every key of upstream's chart values, set to something other than its default, does what it says.

For each leaf of ``tests/data/upstream-default-values.yaml`` (upstream's key list) the table below
gives a non-default value and what imexdra's chart must do with it: render something different (the
key is honoured), fail naming the key (a part imexdra does not ship, asked for), or render the same
for a stated reason (a setting of a part that is disabled, as in upstream's chart). A key missing from
the table fails the test, so a key added to the list must be classified.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from tests.support.upstream import upstream_values
from tests.unit.chart.helm import merge, nested, render, render_error, walk

UPSTREAM_VALUES = upstream_values()


@dataclass(frozen=True)
class Honoured:
    """The value changes what is rendered."""


@dataclass(frozen=True)
class Refused:
    """Rendering fails and the message names the key (``text``: what else it must say)."""

    text: str = ""


@dataclass(frozen=True)
class Inert:
    """Rendered the same, for ``reason``."""

    reason: str


WEBHOOK_OFF = Inert("webhook.enabled is false: upstream's chart renders nothing of the webhook either")
GPUS_OFF = Inert("resources.gpus.enabled is false: upstream renders no GPU plugin container either")
TOLERATION = [{"key": "example.com/dedicated", "operator": "Exists", "effect": "NoSchedule"}]
SELECTOR = {"example.com/pool": "gb200"}
ANNOTATIONS = {"example.com/team": "ml"}
SECURITY = {"runAsNonRoot": False, "fsGroup": 2000}
RESOURCES = {"requests": {"cpu": "100m", "memory": "64Mi"}}
ENV = [{"name": "EXAMPLE", "value": "1"}]
AFFINITY_TERM = [
    {"weight": 1, "preference": {"matchExpressions": [{"key": "example.com/x", "operator": "Exists"}]}}
]

KEYS: dict[str, tuple[Any, Honoured | Refused | Inert]] = {
    "nvidiaDriverRoot": ("/run/nvidia/driver", Honoured()),
    "nvidiaCDIHookPath": ("/usr/local/bin/nvidia-cdi-hook", Refused()),
    "altProcDevices": ("/host/proc/devices", Honoured()),
    "nameOverride": ("other", Honoured()),
    "fullnameOverride": ("other-driver", Honoured()),
    "namespaceOverride": ("elsewhere", Honoured()),
    "selectorLabelsOverride": ({"app": "other"}, Honoured()),
    "gpuResourcesEnabledOverride": (True, Inert("read only with resources.gpus.enabled, false here")),
    "consumableShares": ("4", Refused()),
    "allowDefaultNamespace": (True, Inert("the release is not in the default namespace")),
    "resourceApiVersion": ("v1beta1", Refused()),
    "imagePullSecrets": ([{"name": "pull"}], Honoured()),
    "image.repository": ("registry.example.com/other/imexdra", Honoured()),
    "image.pullPolicy": ("Always", Honoured()),
    "image.tag": ("v9.9.9", Honoured()),
    "serviceAccount.create": (False, Honoured()),
    "serviceAccount.annotations": (ANNOTATIONS, Honoured()),
    "serviceAccount.name": ("my-account", Honoured()),
    "resources.gpus.enabled": (True, Refused()),
    "resources.computeDomains.enabled": (False, Honoured()),
    "resources.computeDomains.imex.mode": ("hostManaged", Refused("HostManagedIMEX")),
    "resources.computeDomains.imex.isolation": ("channel", Refused()),
    "resources.computeDomains.imex.hostSocketPath": ("/run/nvidia-imex/imex_ctrl.sock", Honoured()),
    "featureGates": ({"ComputeDomainCliques": False}, Honoured()),
    "logVerbosity": ("6", Honoured()),
    "webhook.enabled": (True, Refused()),
    "webhook.replicas": (3, WEBHOOK_OFF),
    "webhook.servicePort": (8443, WEBHOOK_OFF),
    "webhook.containerPort": (8443, WEBHOOK_OFF),
    "webhook.priorityClassName": ("high", WEBHOOK_OFF),
    "webhook.strategy.type": ("Recreate", WEBHOOK_OFF),
    "webhook.strategy.rollingUpdate.maxUnavailable": ("50%", WEBHOOK_OFF),
    "webhook.podAnnotations": (ANNOTATIONS, WEBHOOK_OFF),
    "webhook.podSecurityContext": (SECURITY, WEBHOOK_OFF),
    "webhook.nodeSelector": (SELECTOR, WEBHOOK_OFF),
    "webhook.tolerations": (TOLERATION, WEBHOOK_OFF),
    "webhook.affinity": ({"nodeAffinity": {}}, WEBHOOK_OFF),
    "webhook.containers.webhook.securityContext.privileged": (True, WEBHOOK_OFF),
    "webhook.containers.webhook.resources": (RESOURCES, WEBHOOK_OFF),
    "webhook.serviceAccount.create": (False, WEBHOOK_OFF),
    "webhook.serviceAccount.name": ("hook", WEBHOOK_OFF),
    "webhook.failurePolicy": ("Ignore", WEBHOOK_OFF),
    "webhook.tls.mode": ("secret", WEBHOOK_OFF),
    "webhook.tls.certManager.issuerType": ("clusterissuer", WEBHOOK_OFF),
    "webhook.tls.certManager.issuerName": ("issuer", WEBHOOK_OFF),
    "webhook.tls.certManager.dnsNames": (["hook.example.com"], WEBHOOK_OFF),
    "webhook.tls.secret.name": ("hook-tls", WEBHOOK_OFF),
    "webhook.tls.secret.caBundle": ("Q0E=", WEBHOOK_OFF),
    "controller.replicas": (2, Refused("leaderElection")),
    "controller.leaderElection.enabled": (True, Honoured()),
    "controller.leaderElection.leaseDuration": ("30s", Inert("read only with leaderElection.enabled")),
    "controller.leaderElection.renewDeadline": ("20s", Inert("read only with leaderElection.enabled")),
    "controller.leaderElection.retryPeriod": ("5s", Inert("read only with leaderElection.enabled")),
    "controller.metrics.enabled": (False, Honoured()),
    "controller.metrics.httpEndpoint": (":9090", Honoured()),
    "controller.metrics.metricsPath": ("/m", Honoured()),
    "controller.metrics.profilePath": ("/debug/pprof", Honoured()),
    "controller.priorityClassName": ("high", Honoured()),
    "controller.podAnnotations": (ANNOTATIONS, Honoured()),
    "controller.podSecurityContext": (SECURITY, Honoured()),
    "controller.nodeSelector": (SELECTOR, Honoured()),
    "controller.tolerations": (TOLERATION, Honoured()),
    "controller.containers.computeDomain.securityContext": ({"privileged": True}, Honoured()),
    "controller.containers.computeDomain.env": (ENV, Honoured()),
    "controller.containers.computeDomain.resources": (RESOURCES, Honoured()),
    "controller.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution": (
        AFFINITY_TERM,
        Honoured(),
    ),
    "controller.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution": ([], Honoured()),
    "controller.networkPolicy.enabled": (True, Honoured()),
    "kubeletPlugin.metrics.enabled": (False, Honoured()),
    "kubeletPlugin.metrics.gpuHttpEndpoint": (":9090", Refused()),
    "kubeletPlugin.metrics.computeDomainHttpEndpoint": (":9091", Honoured()),
    "kubeletPlugin.metrics.metricsPath": ("/m", Honoured()),
    "kubeletPlugin.priorityClassName": ("high", Honoured()),
    "kubeletPlugin.updateStrategy.type": ("OnDelete", Honoured()),
    "kubeletPlugin.updateStrategy.rollingUpdate.maxUnavailable": ("1", Honoured()),
    "kubeletPlugin.podAnnotations": (ANNOTATIONS, Honoured()),
    "kubeletPlugin.podSecurityContext": (SECURITY, Honoured()),
    "kubeletPlugin.nodeSelector": (SELECTOR, Honoured()),
    "kubeletPlugin.tolerations": (TOLERATION, Honoured()),
    "kubeletPlugin.kubeletRegistrarDirectoryPath": ("/var/lib/k0s/kubelet/plugins_registry", Honoured()),
    "kubeletPlugin.kubeletPluginsDirectoryPath": ("/var/lib/k0s/kubelet/plugins", Honoured()),
    "kubeletPlugin.containers.init.securityContext": ({"privileged": True}, Refused()),
    "kubeletPlugin.containers.init.resources": (RESOURCES, Refused()),
    "kubeletPlugin.containers.computeDomains.env": (ENV, Honoured()),
    "kubeletPlugin.containers.computeDomains.securityContext.privileged": (False, Honoured()),
    "kubeletPlugin.containers.computeDomains.resources": (RESOURCES, Honoured()),
    "kubeletPlugin.containers.computeDomains.healthcheckPort": (51600, Honoured()),
    "kubeletPlugin.containers.computeDomains.gpuCliqueLabelEnabled": (True, Honoured()),
    "kubeletPlugin.containers.gpus.env": (ENV, GPUS_OFF),
    "kubeletPlugin.containers.gpus.securityContext.privileged": (False, GPUS_OFF),
    "kubeletPlugin.containers.gpus.resources": (RESOURCES, GPUS_OFF),
    "kubeletPlugin.containers.gpus.healthcheckPort": (51700, GPUS_OFF),
    "kubeletPlugin.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms": (
        [{"matchExpressions": [{"key": "example.com/gpu", "operator": "Exists"}]}],
        Honoured(),
    ),
    "kubeletPlugin.networkPolicy.enabled": (True, Honoured()),
}


def test_every_upstream_key_is_in_the_table() -> None:
    """The table classifies exactly upstream's keys."""
    assert sorted(walk(UPSTREAM_VALUES)) == sorted(KEYS)


@pytest.mark.parametrize("key", sorted(KEYS))
def test_a_non_default_value(key: str) -> None:
    """Honoured, refused naming the key, or inert for the stated reason."""
    value, expected = KEYS[key]
    values = merge(UPSTREAM_VALUES, nested(key, value))
    if isinstance(expected, Refused):
        message = render_error(values)
        assert key.split(".")[-1] in message and expected.text in message, message
        return
    changed = render(values).manifest != render(UPSTREAM_VALUES).manifest
    assert changed == isinstance(expected, Honoured), expected
