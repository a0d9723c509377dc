"""Names every component must agree on, verbatim from upstream (docs/compatibility.md §2.2).

Drop-in compatibility depends on these strings: a cluster that ran the upstream driver carries them in
finalizers, labels, DeviceClasses and opaque configs, so they are never renamed here. Note that the
ComputeDomain finalizer and the ComputeDomain label key are the same string upstream; both names exist
below so call sites say which role they mean.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

#: The DRA driver name of the ComputeDomain side (ResourceSlices, opaque configs, CDI vendor prefix).
DRIVER_NAME: Final = "compute-domain.nvidia.com"

API_GROUP: Final = "resource.nvidia.com"
API_GROUP_VERSION: Final = "v1beta1"
#: ``apiVersion`` of the CRDs and of the opaque configuration kinds.
API_VERSION: Final = f"{API_GROUP}/{API_GROUP_VERSION}"

KIND_COMPUTE_DOMAIN: Final = "ComputeDomain"
KIND_COMPUTE_DOMAIN_CLIQUE: Final = "ComputeDomainClique"
KIND_CHANNEL_CONFIG: Final = "ComputeDomainChannelConfig"
KIND_DAEMON_CONFIG: Final = "ComputeDomainDaemonConfig"

PLURAL_COMPUTE_DOMAINS: Final = "computedomains"
PLURAL_COMPUTE_DOMAIN_CLIQUES: Final = "computedomaincliques"
CRD_COMPUTE_DOMAINS: Final = f"{PLURAL_COMPUTE_DOMAINS}.{API_GROUP}"
CRD_COMPUTE_DOMAIN_CLIQUES: Final = f"{PLURAL_COMPUTE_DOMAIN_CLIQUES}.{API_GROUP}"

#: Label carrying a ComputeDomain's UID on DaemonSets, daemon pods, claim templates, cliques and nodes.
COMPUTE_DOMAIN_LABEL_KEY: Final = "resource.nvidia.com/computeDomain"
#: Finalizer on ComputeDomains, daemon DaemonSets and both claim templates (same string as the label key).
COMPUTE_DOMAIN_FINALIZER: Final = COMPUTE_DOMAIN_LABEL_KEY
#: Node label the kubelet plugin sets to the UID of the ComputeDomain whose workload runs there.
NODE_LABEL_KEY: Final = COMPUTE_DOMAIN_LABEL_KEY
#: Label carrying the IMEX clique ID on daemon pods and cliques (present but empty = non-fabric node).
CLIQUE_LABEL_KEY: Final = "resource.nvidia.com/computeDomain.cliqueID"
#: Label telling the two controller-created ResourceClaimTemplates apart (values: ``ClaimTemplateTarget``).
TARGET_LABEL_KEY: Final = "resource.nvidia.com/computeDomainTarget"
#: Optional node label with the GPU clique, managed by the kubelet plugin when enabled.
GPU_CLIQUE_NODE_LABEL_KEY: Final = "nvidia.com/gpu.clique"

#: DeviceClass selecting IMEX channel 0, used by workload claim templates.
DEVICE_CLASS_DEFAULT_CHANNEL: Final = "compute-domain-default-channel.nvidia.com"
#: DeviceClass selecting the IMEX channels 1 and up, used by workload claim templates under channel
#: isolation, whose CEL selector then names the domain's own channel (docs/channel-isolation.md §6).
DEVICE_CLASS_CHANNEL: Final = "compute-domain-channel.nvidia.com"
#: DeviceClass selecting the daemon device, used by daemon claim templates (driver-managed mode only).
DEVICE_CLASS_DAEMON: Final = "compute-domain-daemon.nvidia.com"

#: Device attribute names as published in ResourceSlices (unqualified: the domain is the driver name).
DEVICE_ATTRIBUTE_TYPE: Final = "type"
DEVICE_ATTRIBUTE_ID: Final = "id"
#: The same attributes fully qualified, as CEL selectors and users name them.
QUALIFIED_DEVICE_ATTRIBUTE_TYPE: Final = f"{DRIVER_NAME}/{DEVICE_ATTRIBUTE_TYPE}"
QUALIFIED_DEVICE_ATTRIBUTE_ID: Final = f"{DRIVER_NAME}/{DEVICE_ATTRIBUTE_ID}"

#: Request names inside the controller-rendered claim templates.
CHANNEL_REQUEST_NAME: Final = "channel"
DAEMON_REQUEST_NAME: Final = "daemon"

#: Name prefix of a ComputeDomain's daemon DaemonSet and daemon claim template (suffix: the CD UID).
DAEMON_OBJECT_NAME_PREFIX: Final = "computedomain-daemon-"
#: Upstream's bound on daemons per IMEX domain (flag ``--max-nodes-per-imex-domain``).
DEFAULT_MAX_NODES_PER_IMEX_DOMAIN: Final = 18
#: TCP ports of an IMEX daemon's peer service (``SERVER_PORT``) and command service (``IMEX_CMD_PORT``),
#: as the daemon's config template sets them; the daemons' NetworkPolicy opens these to peers only.
IMEX_SERVER_PORT: Final = 50000
IMEX_CMD_PORT: Final = 50005
#: Under gate ComputeDomainBindingConditions, every channel device a driver-managed node publishes
#: carries this binding condition and this binding failure condition: the controller sets the first
#: in a claim's ``status.devices`` once the node's IMEX daemon of the claim's domain is Ready, the
#: second when the claim can never be prepared there (docs/binding-conditions.md).
BINDING_CONDITION_DAEMON_READY: Final = "IMEXDaemonReady"
BINDING_FAILURE_CONDITION: Final = "IMEXDaemonFailed"


class DeviceType(StrEnum):
    """Values of the ``type`` device attribute; in the checkpoint, the key a prepared device sits under."""

    CHANNEL = "channel"
    DAEMON = "daemon"


class ClaimTemplateTarget(StrEnum):
    """Values of ``TARGET_LABEL_KEY`` on controller-created ResourceClaimTemplates."""

    DAEMON = "Daemon"
    WORKLOAD = "Workload"


class AllocationMode(StrEnum):
    """How many IMEX channels a workload channel claim gets: channel 0 only, or all of them."""

    SINGLE = "Single"
    ALL = "All"


class ComputeDomainStatusValue(StrEnum):
    """Values of ``status.status`` and of each node's or daemon's ``status``."""

    READY = "Ready"
    NOT_READY = "NotReady"


class ConditionStatus(StrEnum):
    """Values of a condition's ``status`` (``metav1.Condition``)."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


def daemon_object_name(compute_domain_uid: str) -> str:
    """Name of the daemon DaemonSet and of the daemon claim template of one ComputeDomain."""
    return f"{DAEMON_OBJECT_NAME_PREFIX}{compute_domain_uid}"
