"""Reading ResourceClaims from the API server as raw JSON (the ``driverapi.ClaimGetter`` the plugin uses).

Raw JSON rather than typed models: the claim's status goes into the checkpoint verbatim (opaque
parameters included), and skipping model decoding keeps the per-prepare GET cheap. Only
``resource.k8s.io/v1`` is asked; upstream's library falls back to v1beta2/v1beta1 on 404 for older
clusters, which this driver (Kubernetes >= 1.34 with DRA GA) does not target.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
from lightkube import AsyncClient
from lightkube.resources.resource_v1 import ResourceClaim

from imexdra.common.kube import collection_path, http_client, kube_errors, raise_for_status
from imexdra.kubeletplugin.driverapi import ClaimGetter


def api_claim_getter(client: AsyncClient) -> ClaimGetter:
    """A ``ClaimGetter`` over ``client``; failures raise ``ApiStatusError`` (404 → ``is_not_found``)."""
    http = http_client(client)

    async def get_claim(namespace: str, name: str) -> Mapping[str, Any]:
        action = f"get ResourceClaim {namespace}/{name}"
        path = f"{collection_path(client, ResourceClaim, namespace)}/{name}"
        with kube_errors(action):
            response = await http.get(path)
        await raise_for_status(response, action)
        claim: Mapping[str, Any] = msgspec.json.decode(response.content)
        return claim

    return get_claim
