"""An operator's values file from upstream's chart installs imexdra as it asks (docs/compatibility.md).

``tests/data/upstream-default-values.yaml`` has every key of upstream's chart values at upstream's default,
except the two a ComputeDomain-only operator of imexdra must set whatever else they keep:
``resources.gpus.enabled=false`` (no GPU plugin here; true fails with the reason) and the image
(upstream's Go image cannot run imexdra's programs; pointing at it fails with the reason). Keys for
parts imexdra does not ship are accepted while they ask for nothing; the guards in test_chart_values.py
refuse them, naming the key, when they do.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.upstream import upstream_values
from tests.unit.chart.helm import merge, nested, render

UPSTREAM_VALUES = upstream_values()
IMAGE = {"image": {"repository": UPSTREAM_VALUES["image"]["repository"]}}
CONTROLLER = ("Deployment", "imexdra-controller")
PLUGIN = ("DaemonSet", "imexdra-kubelet-plugin")


def _pod(objects: Any, kind: str, name: str) -> dict[str, Any]:
    [obj] = [o for o in objects if (o["kind"], o["metadata"]["name"]) == (kind, name)]
    pod: dict[str, Any] = obj["spec"]["template"]["spec"]
    return pod


def test_upstream_defaults_render_what_our_defaults_render() -> None:
    """Upstream's full default values file asks for exactly what imexdra's defaults give.

    Its controller anti-affinity names upstream's component label, read as ours: the replicas spread
    by host all the same.
    """
    upstream = render(UPSTREAM_VALUES).objects
    ours = render(IMAGE).objects
    assert len(upstream) == len(ours)
    for got, want in zip(upstream, ours, strict=True):
        if (got["kind"], got["metadata"]["name"]) != CONTROLLER:
            assert got == want
    controller = next(o for o in upstream if (o["kind"], o["metadata"]["name"]) == CONTROLLER)
    [term] = controller["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    selector = term["podAffinityTerm"]["labelSelector"]["matchLabels"]
    assert selector == {"imexdra-component": "controller"}
    assert selector.items() <= controller["spec"]["template"]["metadata"]["labels"].items()


def test_plugin_affinity_has_upstreams_nfd_and_gpu_operator_terms() -> None:
    """The default plugin affinity is upstream's: NFD's NVIDIA PCI/class labels, CPU vendor, GPU operator."""
    affinity = _pod(render(IMAGE).objects, *PLUGIN)["affinity"]
    assert affinity == UPSTREAM_VALUES["kubeletPlugin"]["affinity"]


@pytest.mark.parametrize(
    "override",
    [
        nested("webhook.replicas", 3),
        nested("webhook.tls.mode", "secret"),
        nested("kubeletPlugin.containers.gpus.healthcheckPort", 1),
        nested("kubeletPlugin.containers.gpus.env", [{"name": "X", "value": "1"}]),
        nested("kubeletPlugin.containers.init", {"securityContext": {}, "resources": {}}),
    ],
    ids=["webhook-replicas", "webhook-tls", "gpu-port", "gpu-env", "init-defaults"],
)
def test_settings_of_disabled_upstream_parts_are_inert(override: dict[str, Any]) -> None:
    """With the webhook and GPUs disabled their settings render nothing, as in upstream's chart."""
    assert render(merge(UPSTREAM_VALUES, override)).objects == render(UPSTREAM_VALUES).objects
