"""Reading pod events in cluster tests, shared by the integration and e2e tiers."""

from __future__ import annotations

import json
from typing import Any

from imexdra_sim.localcluster.cluster import LocalCluster

# The prefix our plugin puts on every failed NodePrepareResources result (kubeletplugin/driver.py).
DRIVER_PREPARE_ERROR = "error preparing devices for claim"


def pod_events(cluster: LocalCluster, namespace: str, pod: str) -> list[dict[str, Any]]:
    """Events about one pod, oldest first."""
    out = cluster.kubectl(
        "get", "events", "-n", namespace, f"--field-selector=involvedObject.name={pod}", "-o", "json"
    ).stdout
    events: list[dict[str, Any]] = json.loads(out)["items"]
    return sorted(events, key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "")


def driver_prepare_failure(cluster: LocalCluster, namespace: str, pod: str) -> dict[str, Any] | None:
    """The pod's first ``FailedPrepareDynamicResources`` event that our plugin's error caused.

    The kubelet reads the ResourceClaim itself before it calls the plugin, and the node authorizer may
    refuse that read ("no relationship found between node ...") for a moment after the pod is bound;
    the kubelet retries, but the refusal is a ``FailedPrepareDynamicResources`` event too. Tests that
    assert on the driver's message must skip those.
    """
    for event in pod_events(cluster, namespace, pod):
        if event["reason"] == "FailedPrepareDynamicResources" and DRIVER_PREPARE_ERROR in event["message"]:
            return event
    return None
