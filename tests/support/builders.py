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
    template: str,
    *,
    existing_claim: bool = False,
    node: str | None = None,
    image: str = PAUSE_IMAGE,
    claim: str = "channel",
    grace_seconds: int | None = 1,
) -> dict[str, Any]:
    """A pod whose one container takes an IMEX channel from the claim template ``template``.

    ``existing_claim``: ``template`` names a ResourceClaim the pod uses as it is (``resourceClaimName``).

    ``node`` pins it through the scheduler (a hostname nodeSelector); ``grace_seconds`` (1 by default,
    so deleting one is quick) is left to the cluster's default when None.
    """
    spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "resourceClaims": [
            {
                "name": claim,
                ("resourceClaimName" if existing_claim else "resourceClaimTemplateName"): template,
            }
        ],
        "containers": [{"name": "main", "image": image, "resources": {"claims": [{"name": claim}]}}],
    }
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
