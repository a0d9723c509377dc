"""The pod tests run against a ComputeDomain: one container holding one claim from the domain's template.

Only tests run workload pods (the benchmarks submit Jobs), so this builder lives here rather than in
``imexdra_sim.builders``, which holds the domain, claim template and claim builders both use.
"""

from __future__ import annotations

from typing import Any

PAUSE_IMAGE = "registry.k8s.io/pause:3.10"


def channel_pod(
    name: str,
    namespace: str,
    template: str | None,
    *,
    existing_claim: bool = False,
    node: str | None = None,
    image: str = PAUSE_IMAGE,
    command: list[str] | None = None,
    claim: str = "channel",
    grace_seconds: int | None = 1,
) -> dict[str, Any]:
    """A pod whose one container takes an IMEX channel from the claim template ``template``
    (None: a pod with no claim at all).

    ``existing_claim``: ``template`` names a ResourceClaim the pod uses as it is (``resourceClaimName``).

    ``node`` pins it through the scheduler (a hostname nodeSelector); ``grace_seconds`` (1 by default,
    so deleting one is quick) is left to the cluster's default when None; ``command`` replaces the
    image's entry point.
    """
    container: dict[str, Any] = {"name": "main", "image": image}
    if command is not None:
        container["command"] = command
    spec: dict[str, Any] = {"automountServiceAccountToken": False, "containers": [container]}
    if template is not None:
        source = "resourceClaimName" if existing_claim else "resourceClaimTemplateName"
        spec["resourceClaims"] = [{"name": claim, source: template}]
        container["resources"] = {"claims": [{"name": claim}]}
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    if grace_seconds is not None:
        spec["terminationGracePeriodSeconds"] = grace_seconds
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }
