"""Reading ResourceClaims from the API server (the ``driver.ClaimGetter`` the plugin uses).

The claim is decoded by ``resourceclaim.parse_claim``, not into the generated models
(``common.kube.models``): a driver's checkpoint (the IMEX driver's) records the whole status in Go's
canonical form (opaque parameters verbatim), and decoding only what the plugin reads keeps the
per-prepare GET cheap. Only
``resource.k8s.io/v1`` is asked; upstream's library falls back to v1beta2/v1beta1 on 404 for older
clusters, which this driver (Kubernetes >= 1.34 with DRA GA) does not target.
"""

from __future__ import annotations

import msgspec

from imexdra.common.kube.api import KubeApi
from imexdra.common.kube.models import resource_v1
from imexdra.common.kube.transport import resource_path
from imexdra.dra.driver import ClaimGetter
from imexdra.dra.resourceclaim import ResourceClaim, parse_claim


def api_claim_getter(transport: KubeApi) -> ClaimGetter:
    """A ``ClaimGetter`` over ``transport`` (one GET per prepare: the lean path, docs/architecture.md §6).

    Failures raise ``ApiStatusError`` (404 → ``is_not_found``); a body that is not a ResourceClaim
    raises ``MalformedClaimError``.
    """

    async def get_claim(namespace: str, name: str) -> ResourceClaim:
        response = await transport.request(
            "GET",
            resource_path(resource_v1.ResourceClaim, name, namespace=namespace),
            action=f"get ResourceClaim {namespace}/{name}",
        )
        return parse_claim(msgspec.json.decode(response.body))

    return get_claim
