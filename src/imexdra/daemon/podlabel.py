"""Announcing this daemon: the clique-ID label on its own pod, the only object a daemon writes.

The controller reads the label to place the pod in its clique (``controller.daemons``): a present but
empty value announces a node without an NVLink fabric, an absent label "not announced yet". The write
is a JSON merge patch of ``metadata.labels``, so it needs only ``patch`` on its own pod and never
conflicts. Transient API failures are retried with backoff until they succeed or the daemon is asked
to stop; a permanent one (e.g. RBAC) fails the daemon.
"""

from __future__ import annotations

import asyncio

import structlog

from imexdra.api.constants import CLIQUE_LABEL_KEY
from imexdra.common.kube.api import KubeApi, PatchType
from imexdra.common.kube.client import RetryableApiError, kube_errors
from imexdra.common.kube.models.core_v1 import Pod
from imexdra.common.pacing.ratelimit import Backoff

_log = structlog.get_logger(__name__)


async def label_own_pod(client: KubeApi, *, name: str, namespace: str, clique_id: str) -> None:
    """Set ``resource.nvidia.com/computeDomain.cliqueID=<clique_id>`` on pod ``namespace/name``."""
    patch = {"metadata": {"labels": {CLIQUE_LABEL_KEY: clique_id}}}
    backoff = Backoff(base=0.5, cap=10.0)
    while True:
        try:
            with kube_errors(f"label pod {namespace}/{name}"):
                await client.patch(Pod, name, patch, namespace=namespace, patch_type=PatchType.MERGE)
        except RetryableApiError as error:
            delay = backoff.next_delay()
            _log.warning("Failed to label pod; retrying", error=str(error), retry_in=round(delay, 2))
            await asyncio.sleep(delay)
            continue
        _log.info("Pod labelled", pod=f"{namespace}/{name}", label=CLIQUE_LABEL_KEY, value=clique_id)
        return
