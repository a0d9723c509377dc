"""Who may hold a ComputeDomain daemon device: only the IMEX daemon pods of that domain (docs/tenancy.md).

A daemon claim gives its container the node's NVIDIA device nodes, the fabric IMEX management
capability, the domain's identity and its ``/imexd`` directory. The controller is the only legitimate
source of such claims: it renders the daemon ResourceClaimTemplate into the daemon DaemonSet of each
domain, in the driver namespace. ``DaemonPodOwners.check`` holds every daemon claim to that, asking the
API server rather than trusting names:

1. the claim lives in the driver namespace (a tenant cannot create claims there);
2. ``status.reservedFor`` names at least one consumer, and every consumer is a pod;
3. each such pod exists with the reserved UID and is controlled by a DaemonSet (its controller
   ownerReference, ``apps/v1``);
4. that DaemonSet exists with the referenced UID and carries the label
   ``resource.nvidia.com/computeDomain=<the config's domainID>``, as the controller renders it.

A failed check is a ``PermanentError`` (the kubelet turns it into a pod event); an API server that
cannot answer is a ``RetryableError``.

The pod and the DaemonSet are read raw and decoded into ``_Object``, their metadata only: the check
reads nothing else, and a full Pod model cost each plugin process about a third of its CPU
in the job-start bench (its type tree is compiled on the first decode, which is the node's first daemon
claim, on the job's critical path).
"""

from __future__ import annotations

import msgspec

from imexdra.api.constants import COMPUTE_DOMAIN_LABEL_KEY, DEVICE_CLASS_DAEMON
from imexdra.common.errors import DriverError, PermanentError, RetryableError
from imexdra.common.kube.api import KubeApi
from imexdra.common.kube.client import ApiStatusError, is_not_found
from imexdra.common.kube.models.apps_v1 import DaemonSet
from imexdra.common.kube.models.core_v1 import Pod
from imexdra.common.kube.transport import resource_path
from imexdra.dra.resourceclaim import ResourceClaim, ResourceClaimConsumerReference


class _OwnerReference(msgspec.Struct, rename="camel"):
    api_version: str = ""
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool = False


class _Metadata(msgspec.Struct, rename="camel"):
    uid: str = ""
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    owner_references: list[_OwnerReference] = msgspec.field(default_factory=list)


class _Object(msgspec.Struct):
    """The part of a Pod or DaemonSet the check reads."""

    metadata: _Metadata = msgspec.field(default_factory=_Metadata)


_decoder = msgspec.json.Decoder(_Object)


class DaemonClaimRefusedError(PermanentError):
    """A daemon claim that is not held by its ComputeDomain's own IMEX daemon pods."""


def _refused(claim: ResourceClaim, why: str) -> DaemonClaimRefusedError:
    return DaemonClaimRefusedError(
        f"ResourceClaim {claim.ref.namespace}/{claim.ref.name} requests a ComputeDomain daemon device "
        f"(DeviceClass {DEVICE_CLASS_DAEMON}), which only the IMEX daemon pods the driver runs for that "
        f"ComputeDomain may use: {why}. A workload takes its IMEX channel through its ComputeDomain's "
        "ResourceClaimTemplate (spec.channel.resourceClaimTemplate.name)"
    )


def _consumer_text(consumer: ResourceClaimConsumerReference) -> str:
    group = f"{consumer.api_group}/" if consumer.api_group else ""
    return f"{group}{consumer.resource} {consumer.name} (UID {consumer.uid})"


class DaemonPodOwners:
    """``DaemonClaimOwners`` against the API server (pods and DaemonSets of the driver namespace)."""

    def __init__(self, transport: KubeApi, namespace: str) -> None:
        self._transport = transport
        self._namespace = namespace

    async def check(self, claim: ResourceClaim, domain_uid: str) -> None:
        """Return when only ``domain_uid``'s daemon pods hold ``claim``; raise otherwise."""
        if claim.ref.namespace != self._namespace:
            raise _refused(claim, f"it is not in the driver namespace {self._namespace}")
        if not claim.status.reserved_for:
            raise _refused(claim, "it is reserved for no pod")
        for consumer in claim.status.reserved_for:
            await self._check_consumer(claim, consumer, domain_uid)

    async def _check_consumer(
        self, claim: ResourceClaim, consumer: ResourceClaimConsumerReference, domain_uid: str
    ) -> None:
        if consumer.resource != "pods" or consumer.api_group:
            raise _refused(claim, f"it is reserved for {_consumer_text(consumer)}, which is not a pod")
        name, uid = consumer.name, consumer.uid
        pod = await self._get(Pod, name) if name else None
        if pod is None or pod.metadata.uid != uid:
            raise _refused(claim, f"the pod {name} it is reserved for (UID {uid}) no longer exists")
        owner = next((ref for ref in pod.metadata.owner_references if ref.controller), None)
        if owner is None or owner.kind != "DaemonSet" or owner.api_version != "apps/v1":
            raise _refused(claim, f"pod {name} is not controlled by a DaemonSet")
        daemonset = await self._get(DaemonSet, owner.name)
        if daemonset is None or daemonset.metadata.uid != owner.uid:
            raise _refused(claim, f"DaemonSet {owner.name} of pod {name} no longer exists")
        labelled = daemonset.metadata.labels.get(COMPUTE_DOMAIN_LABEL_KEY)
        if labelled != domain_uid:
            raise _refused(
                claim,
                f"pod {name} belongs to DaemonSet {owner.name}, which is not the IMEX daemon DaemonSet of "
                f"ComputeDomain {domain_uid} ({COMPUTE_DOMAIN_LABEL_KEY}={labelled or '<unset>'})",
            )

    async def _get(self, kind: type[Pod | DaemonSet], name: str) -> _Object | None:
        """The named ``kind`` (Pod or DaemonSet) of the driver namespace, or None when it does not exist."""
        action = f"get {kind.__name__} {self._namespace}/{name}"
        path = resource_path(kind, name, namespace=self._namespace)
        try:
            response = await self._transport.request("GET", path, action=action)
            return _decoder.decode(response.body)
        except ApiStatusError as error:
            if is_not_found(error):
                return None
            raise RetryableError(str(error)) from error
        except (DriverError, msgspec.ValidationError) as error:
            raise RetryableError(f"{action}: {error}") from error
