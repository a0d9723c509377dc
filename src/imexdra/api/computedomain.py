"""The ComputeDomain custom resource as typed msgspec models of a kind (``common.kube.resource``).

``ComputeDomain`` works with every ``KubeApi`` verb (create, get, list, watch, patch, replace,
delete, apply); ``ComputeDomain.Status`` is its status subresource (get, patch, replace). Field names
on the wire, optional/required fields and omit-when-empty rules match upstream exactly
(docs/compatibility.md §2.1), so objects written by upstream decode here and vice versa:

- ``status.nodes`` is left out when empty (upstream e2e checks that the key disappears); with a JSON
  merge patch an omitted key means "unchanged", so clear nodes with ``replace`` on the status
  subresource (``status_update``), as upstream's UpdateStatus does;
- every node always carries ``index`` (0 and -1 included) and ``status``;
- ``status.status`` is always written when a status is;
- ``status.channel`` and ``status.conditions`` are ours (channel isolation, docs/channel-isolation.md
  §2; the ``IMEXPeersConnected`` condition, docs/imex-health.md): additive, written by the
  controller only, and left out when unset, so a status under ``domain`` isolation without IMEX
  health reports is byte-for-byte upstream's; so is a node's ``imexPeers``.

Decoding ignores unknown fields (as Go clients do): the apiserver validates objects against the CRD,
and a stricter model would let one odd object break a whole LIST.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, ClassVar

import msgspec
from msgspec import UNSET, UnsetType

from imexdra.api.constants import (
    API_GROUP,
    API_GROUP_VERSION,
    API_VERSION,
    KIND_COMPUTE_DOMAIN,
    PLURAL_COMPUTE_DOMAINS,
    AllocationMode,
    ComputeDomainStatusValue,
    ConditionStatus,
)
from imexdra.api.imexpeers import ImexPeers
from imexdra.common.kube.models.meta_v1 import ObjectMeta
from imexdra.common.kube.resource import ApiInfo, Model

NonNegativeInt = Annotated[int, msgspec.Meta(ge=0)]
#: An IMEX channel number a domain can be given (channel 0 is the shared domain-mode channel).
ChannelNumber = Annotated[int, msgspec.Meta(ge=1)]
# metav1.Condition's validation, as every CRD generated from it carries.
ConditionType = Annotated[
    str,
    msgspec.Meta(
        max_length=316,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$",
    ),
]
ConditionReason = Annotated[
    str, msgspec.Meta(min_length=1, max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
]
ConditionMessage = Annotated[str, msgspec.Meta(max_length=32768)]


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
    #: Ours, left out until the node's daemon reported (``api.imexpeers``, docs/imex-health.md).
    imex_peers: ImexPeers | UnsetType = msgspec.field(name="imexPeers", default=UNSET)


class Condition(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A standard Kubernetes condition (``metav1.Condition``), e.g. ``ChannelAllocated``."""

    type: ConditionType
    status: ConditionStatus
    #: Whole seconds: ``metav1.Time`` has no finer precision.
    last_transition_time: datetime = msgspec.field(name="lastTransitionTime")
    reason: ConditionReason
    message: ConditionMessage
    observed_generation: NonNegativeInt = msgspec.field(name="observedGeneration", default=0)


class ComputeDomainStatus(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Global readiness (a debugging aid; workloads must not gate on it) and per-node entries.

    ``channel`` and ``conditions`` exist only under channel isolation (docs/channel-isolation.md §2).
    """

    status: ComputeDomainStatusValue
    nodes: list[ComputeDomainNode] = msgspec.field(default_factory=list)
    #: The domain's own IMEX channel; recorded once, by the controller, and kept for life.
    channel: ChannelNumber | None = None
    conditions: list[Condition] = msgspec.field(default_factory=list)

    def condition(self, type_: str) -> Condition | None:
        """The condition of that type, if the status has one."""
        return next((c for c in self.conditions if c.type == type_), None)


class _ComputeDomainFields(Model, kw_only=True):
    """Shape shared by the resource and its status subresource."""

    # The client reads and fills these two attributes by their wire names.
    apiVersion: str | None = None  # noqa: N815
    kind: str | None = None
    metadata: ObjectMeta | None = None
    spec: ComputeDomainSpec | None = None
    status: ComputeDomainStatus | None = None

    def __post_init__(self) -> None:
        """Stamp the type so encoded objects always carry apiVersion and kind."""
        self.apiVersion = API_VERSION
        self.kind = KIND_COMPUTE_DOMAIN


class ComputeDomainStatusResource(_ComputeDomainFields, kw_only=True):
    """The ``status`` subresource of a ComputeDomain (verbs: get, patch, replace)."""

    _api_info: ClassVar[ApiInfo] = ApiInfo(
        group=API_GROUP,
        version=API_GROUP_VERSION,
        kind=KIND_COMPUTE_DOMAIN,
        plural=PLURAL_COMPUTE_DOMAINS,
        namespaced=True,
        subresource="status",
    )


class ComputeDomain(_ComputeDomainFields, kw_only=True):
    """A ComputeDomain (``computedomains.resource.nvidia.com``, namespaced)."""

    _api_info: ClassVar[ApiInfo] = ApiInfo(
        group=API_GROUP,
        version=API_GROUP_VERSION,
        kind=KIND_COMPUTE_DOMAIN,
        plural=PLURAL_COMPUTE_DOMAINS,
        namespaced=True,
    )

    Status: ClassVar[type[ComputeDomainStatusResource]] = ComputeDomainStatusResource

    def status_update(self, status: ComputeDomainStatus) -> ComputeDomainStatusResource:
        """Build the body that replaces this object's status (its resourceVersion guards the write)."""
        return ComputeDomainStatusResource(metadata=self.metadata, spec=self.spec, status=status)
