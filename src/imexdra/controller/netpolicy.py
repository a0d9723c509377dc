"""Each driver-managed domain's NetworkPolicy: its IMEX daemons accept IMEX traffic from each other only.

IMEX's peer port and command port take unauthenticated TCP (``IMEX_ENABLE_AUTH_ENCRYPTION=0`` in the
daemon's config), so without a policy any pod of the cluster can connect to any domain's daemons. The
policy (docs/tenancy.md, "Network"), one per domain:

- ``computedomain-daemon-<uid>`` beside the domain's DaemonSet, labelled with the CD label;
- selects the domain's daemon pods (``resource.nvidia.com/computeDomain=<uid>``) and admits, on TCP
  ``SERVER_PORT`` and ``IMEX_CMD_PORT`` of the daemon's config, only pods of the same namespace with the
  same label: the domain's own daemons. Nothing else reaches those pods through an enforcing network
  plugin; the kubelet's exec probes are no network traffic, and traffic from the pod's own node is
  always allowed by NetworkPolicy's definition;
- owned by the DaemonSet (an ownerReference; both live in one namespace), so garbage collection
  removes it with the DaemonSet, also when the controller is not running.

Standard NetworkPolicy cannot say "pods whose label value equals mine", hence one policy per domain.
It is created if absent (found through its own informer, never updated, created again if someone
deletes it): one create per domain over the domain's life (docs/architecture.md §5.1 counts it).
Without an enforcing network plugin the object is stored and does nothing.
"""

from __future__ import annotations

from typing import Any

import structlog

from imexdra.api.constants import COMPUTE_DOMAIN_LABEL_KEY, IMEX_CMD_PORT, IMEX_SERVER_PORT
from imexdra.common.kube.api import KubeApi
from imexdra.common.kube.client import ApiStatusError, is_conflict
from imexdra.common.kube.models.meta_v1 import LabelSelector, ObjectMeta, OwnerReference
from imexdra.common.kube.models.networking_v1 import (
    NetworkPolicy,
    NetworkPolicyIngressRule,
    NetworkPolicyPeer,
    NetworkPolicyPort,
    NetworkPolicySpec,
)
from imexdra.common.machinery.informer import Informer
from imexdra.common.machinery.store import index_by_label
from imexdra.controller.apiwrites import ApiWrites
from imexdra.controller.caches import DaemonSetMeta, domain_label, follow
from imexdra.controller.config import ControllerConfig
from imexdra.controller.overlay import DOMAIN_INDEX, Overlay

_log = structlog.get_logger(__name__)

#: The daemon's IMEX ports, as its config template sets them (``SERVER_PORT``, ``IMEX_CMD_PORT``).
IMEX_PORTS = (IMEX_SERVER_PORT, IMEX_CMD_PORT)


def daemon_network_policy(uid: str, daemon_set: DaemonSetMeta) -> NetworkPolicy:
    """The policy of domain ``uid``, owned by (and named and placed as) its DaemonSet ``daemon_set``."""
    meta = daemon_set.metadata
    if meta is None or not meta.name or not meta.uid:
        raise ValueError("the DaemonSet has no name or UID yet")
    labels = {COMPUTE_DOMAIN_LABEL_KEY: uid}
    owner = OwnerReference(
        apiVersion="apps/v1", kind="DaemonSet", name=meta.name, uid=meta.uid, controller=True
    )
    return NetworkPolicy(
        metadata=ObjectMeta(
            name=meta.name, namespace=meta.namespace, labels=dict(labels), ownerReferences=[owner]
        ),
        spec=NetworkPolicySpec(
            podSelector=LabelSelector(matchLabels=dict(labels)),
            policyTypes=["Ingress"],
            ingress=[
                NetworkPolicyIngressRule(
                    from_=[NetworkPolicyPeer(podSelector=LabelSelector(matchLabels=dict(labels)))],
                    ports=[NetworkPolicyPort(protocol="TCP", port=port) for port in IMEX_PORTS],
                )
            ],
        ),
    )


class DaemonPolicies:
    """The domains' policies: an informer per managed namespace (CD label) and create-if-absent."""

    def __init__(self, client: KubeApi, config: ControllerConfig) -> None:
        indexers: Any = {DOMAIN_INDEX: index_by_label(COMPUTE_DOMAIN_LABEL_KEY)}
        self.informers = [
            Informer(
                client,
                NetworkPolicy,
                namespace=namespace,
                label_selector=COMPUTE_DOMAIN_LABEL_KEY,
                indexers=indexers,
                resync_period=config.resync_seconds,
            )
            for namespace in config.managed_namespaces
        ]
        self.view: Overlay[NetworkPolicy] = Overlay([i.store for i in self.informers], domain_label)
        for informer in self.informers:
            follow(informer, self.view)
        #: Domains whose policy name is taken by an object that is not ours: not tried again.
        self._taken: set[str] = set()

    async def ensure(self, uid: str, daemon_sets: list[DaemonSetMeta], writer: ApiWrites) -> None:
        """Create the policy of domain ``uid`` next to its live DaemonSet unless one is there already.

        No live DaemonSet (not created yet, or going): nothing to do; its creation requeues the domain.
        """
        owner = next((ds for ds in daemon_sets if ds.metadata and ds.metadata.uid and not _going(ds)), None)
        if owner is None or owner.metadata is None:
            return
        namespace, name = owner.metadata.namespace, owner.metadata.name
        # Found by its place, not by the label alone (docs/tenancy.md, "A fixed place, not a label").
        placed = (p.metadata for p in self.view.by_domain(uid))
        if any(meta and (meta.namespace, meta.name) == (namespace, name) for meta in placed):
            self._taken.discard(uid)
            return
        if uid in self._taken:
            return
        try:
            await writer.create(daemon_network_policy(uid, owner), self.view)
        except ApiStatusError as error:
            if not is_conflict(error):
                raise
            # Ours whose create answer was lost (the informer brings it), or a same-named policy
            # someone else made: either way one stands there, and it is not ours to replace.
            self._taken.add(uid)
            _log.warning(
                "NetworkPolicy of the IMEX daemons already exists; left as it is",
                domain=uid,
                namespace=namespace,
                name=owner.metadata.name,
            )


def _going(daemon_set: DaemonSetMeta) -> bool:
    return daemon_set.metadata is not None and daemon_set.metadata.deletionTimestamp is not None
