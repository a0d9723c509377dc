"""The ComputeDomain custom resource as typed msgspec models usable with lightkube's clients.

``ComputeDomain`` works with every ``AsyncClient`` verb (create, get, list, watch, patch, replace,
delete, apply); ``ComputeDomain.Status`` is its status subresource (get, patch, replace). Field names
on the wire, optional/required fields and omit-when-empty rules match upstream exactly
(docs/compatibility.md §2.1), so objects written by upstream decode here and vice versa:

- ``status.nodes`` is left out when empty (upstream e2e checks that the key disappears); with a JSON
  merge patch an omitted key means "unchanged", so clear nodes with ``replace`` on the status
  subresource (``status_update``), as upstream's UpdateStatus does;
- every node always carries ``index`` (0 and -1 included) and ``status``;
- ``status.status`` is always written when a status is.

Decoding ignores unknown fields (as Go clients do): the apiserver validates objects against the CRD,
and a stricter model would let one odd object break a whole LIST.
"""

from __future__ import annotations

from typing import Annotated, ClassVar

import msgspec
from lightkube.core import resource as res
from lightkube.core.resource_registry import resource_registry
from lightkube.core.schema import DictMixin
from lightkube.models.meta_v1 import ObjectMeta

from imexdra.api.constants import (
    API_GROUP,
    API_GROUP_VERSION,
    API_VERSION,
    KIND_COMPUTE_DOMAIN,
    PLURAL_COMPUTE_DOMAINS,
    AllocationMode,
    ComputeDomainStatusValue,
)

NonNegativeInt = Annotated[int, msgspec.Meta(ge=0)]


class ResourceClaimTemplateReference(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The workload ResourceClaimTemplate the controller creates in the ComputeDomain's namespace."""

    name: str


class ComputeDomainChannelSpec(msgspec.Struct, kw_only=True, omit_defaults=True):
    """What a workload claims: the template to create and how many IMEX channels it grants."""

    resource_claim_template: ResourceClaimTemplateReference = msgspec.field(name="resourceClaimTemplate")
    allocation_mode: AllocationMode = msgspec.field(name="allocationMode", default=AllocationMode.SINGLE)


class ComputeDomainSpec(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Immutable after creation (the CRD enforces ``self == oldSelf``)."""

    channel: ComputeDomainChannelSpec
    #: Deprecated upstream; only the driver-managed status computation reads it.
    num_nodes: NonNegativeInt = msgspec.field(name="numNodes", default=0)


class ComputeDomainNode(msgspec.Struct, kw_only=True):
    """One node's IMEX daemon as seen in ``status.nodes`` (every field always serialized)."""

    name: str
    ip_address: str = msgspec.field(name="ipAddress")
    #: ``""`` for a node without an NVLink fabric.
    clique_id: str = msgspec.field(name="cliqueID")
    #: Position within the clique (DNS name index); ``-1`` for a node without an NVLink fabric.
    index: int = 0
    status: ComputeDomainStatusValue = ComputeDomainStatusValue.NOT_READY


class ComputeDomainStatus(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Global readiness (a debugging aid; workloads must not gate on it) and per-node entries."""

    status: ComputeDomainStatusValue
    nodes: list[ComputeDomainNode] = msgspec.field(default_factory=list)


class _ComputeDomainFields(DictMixin, kw_only=True):
    """Shape shared by the resource and its status subresource."""

    # lightkube reads and fills these two attributes by their wire names.
    apiVersion: str | None = None  # noqa: N815
    kind: str | None = None
    metadata: ObjectMeta | None = None
    spec: ComputeDomainSpec | None = None
    status: ComputeDomainStatus | None = None

    def __post_init__(self) -> None:
        """Stamp the type so encoded objects always carry apiVersion and kind."""
        self.apiVersion = API_VERSION
        self.kind = KIND_COMPUTE_DOMAIN


class ComputeDomainStatusResource(res.NamespacedSubResource, _ComputeDomainFields):
    """The ``status`` subresource of a ComputeDomain (verbs: get, patch, replace)."""

    _api_info = res.ApiInfo(
        resource=res.ResourceDef(API_GROUP, API_GROUP_VERSION, KIND_COMPUTE_DOMAIN),
        parent=res.ResourceDef(API_GROUP, API_GROUP_VERSION, KIND_COMPUTE_DOMAIN),
        plural=PLURAL_COMPUTE_DOMAINS,
        verbs=["get", "patch", "put"],
        action="status",
    )


class ComputeDomain(res.NamespacedResourceG, _ComputeDomainFields):
    """A ComputeDomain (``computedomains.resource.nvidia.com``, namespaced)."""

    _api_info = res.ApiInfo(
        resource=res.ResourceDef(API_GROUP, API_GROUP_VERSION, KIND_COMPUTE_DOMAIN),
        plural=PLURAL_COMPUTE_DOMAINS,
        verbs=[
            "delete",
            "deletecollection",
            "get",
            "global_list",
            "global_watch",
            "list",
            "patch",
            "post",
            "put",
            "watch",
        ],
    )

    Status: ClassVar[type[ComputeDomainStatusResource]] = ComputeDomainStatusResource

    def status_update(self, status: ComputeDomainStatus) -> ComputeDomainStatusResource:
        """Build the body that replaces this object's status (its resourceVersion guards the write)."""
        return ComputeDomainStatusResource(metadata=self.metadata, spec=self.spec, status=status)


# Lets lightkube.codecs.load_all_yaml turn ComputeDomain manifests into this class.
resource_registry.register(ComputeDomain)
