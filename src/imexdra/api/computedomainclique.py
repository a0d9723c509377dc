"""The ComputeDomainClique custom resource as a typed msgspec model of a kind (``common.kube.resource``).

A clique object lists the IMEX daemons of one ComputeDomain that share one NVLink clique; it lives in
the driver namespace and is named ``<ComputeDomain UID>.<clique ID>`` (docs/compatibility.md §2.2). It
has no spec and no status subresource: the payload is the top-level ``daemons`` list, which is left
out when empty. Every daemon entry always carries ``index`` and ``status``; ``imexPeers`` (ours) only
once the daemon reported its IMEX connections.
"""

from __future__ import annotations

from typing import ClassVar

import msgspec
from msgspec import UNSET, UnsetType

from imexdra.api.constants import (
    API_GROUP,
    API_GROUP_VERSION,
    API_VERSION,
    KIND_COMPUTE_DOMAIN_CLIQUE,
    PLURAL_COMPUTE_DOMAIN_CLIQUES,
    ComputeDomainStatusValue,
)
from imexdra.api.imexpeers import ImexPeers
from imexdra.common.kube.models.meta_v1 import ObjectMeta
from imexdra.common.kube.resource import ApiInfo, Model


class ComputeDomainDaemonInfo(msgspec.Struct, kw_only=True):
    """One IMEX daemon of the clique (every field always serialized)."""

    node_name: str = msgspec.field(name="nodeName")
    ip_address: str = msgspec.field(name="ipAddress")
    clique_id: str = msgspec.field(name="cliqueID")
    #: Lowest free slot below the max nodes per IMEX domain; names the daemon's DNS entry.
    index: int = 0
    status: ComputeDomainStatusValue = ComputeDomainStatusValue.NOT_READY
    #: Ours, left out until the daemon reported (``api.imexpeers``, docs/imex-health.md).
    imex_peers: ImexPeers | UnsetType = msgspec.field(name="imexPeers", default=UNSET)


class ComputeDomainClique(Model, kw_only=True):
    """A ComputeDomainClique (``computedomaincliques.resource.nvidia.com``, namespaced)."""

    _api_info: ClassVar[ApiInfo] = ApiInfo(
        group=API_GROUP,
        version=API_GROUP_VERSION,
        kind=KIND_COMPUTE_DOMAIN_CLIQUE,
        plural=PLURAL_COMPUTE_DOMAIN_CLIQUES,
        namespaced=True,
    )

    # The client reads and fills these two attributes by their wire names.
    apiVersion: str | None = None  # noqa: N815
    kind: str | None = None
    metadata: ObjectMeta | None = None
    daemons: list[ComputeDomainDaemonInfo] = msgspec.field(default_factory=list)

    def __post_init__(self) -> None:
        """Stamp the type so encoded objects always carry apiVersion and kind."""
        self.apiVersion = API_VERSION
        self.kind = KIND_COMPUTE_DOMAIN_CLIQUE


def clique_name(compute_domain_uid: str, clique_id: str) -> str:
    """Object name of the clique of ``clique_id`` (``<clusterUUID>.<cliqueId>``) in one ComputeDomain."""
    return f"{compute_domain_uid}.{clique_id}"
