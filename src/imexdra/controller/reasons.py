"""Reasons of the Kubernetes Events the controller records on ComputeDomains (``kubectl describe cd``).

Normal: ``Ready`` and ``NotReady`` when the global status changes (driver-managed mode; under
HostManagedIMEX Ready only means "admitted"), ``Finalized`` when cleanup is complete.
Warning: ``ReconcileFailed`` (a step failed and will be retried; the note says which and why),
``ClaimTemplateConflict`` (a ResourceClaimTemplate not made for this domain already has the requested
name), ``CliqueFull`` (a daemon got no index below maxNodesPerIMEXDomain), ``DaemonFailing`` (a node's
IMEX daemon container keeps exiting; the note is its termination message), ``InUse`` (a deleted domain
is kept while pods use its channel; the note names them, docs/in-use-protection.md).
Warning ``NodeNotReady``: a node's daemon is not ready because the node is not (lost, or its kubelet
silent; the note gives the node's Ready condition, docs/node-loss.md).
Channel isolation (docs/channel-isolation.md §7), also the reasons of the ``ChannelAllocated``
condition: ``ChannelAllocated`` (Normal, condition True) and, as Warnings with the condition False,
``ChannelsExhausted``, ``AllocationModeUnsupported``, ``ChannelConflict``, ``ChannelOutOfPool``,
``IsolationMismatch`` and ``IsolationSwitchPending``.
Warning ``LabelIgnored``, the one reason recorded on an object that is not a ComputeDomain: an object
carrying a domain's label outside that domain's place (a look-alike, ``placement``), in its own
namespace, once.
IMEX health (docs/imex-health.md), also reasons of the ``IMEXPeersConnected`` condition: Warning
``IMEXPeersNotConnected`` when the set of node pairs whose IMEX daemons are not connected changes
(the note names them), Normal ``IMEXPeersConnected`` when all are connected again.
The per-namespace bound (``quota``, docs/tenancy.md "Quotas"): ``NamespaceQuotaExceeded``, a Warning
with the ``ChannelAllocated`` condition False, under either isolation.
"""

from __future__ import annotations

from typing import Final

RECONCILE_FAILED: Final = "ReconcileFailed"
CLAIM_TEMPLATE_CONFLICT: Final = "ClaimTemplateConflict"
CLIQUE_FULL: Final = "CliqueFull"
DAEMON_FAILING: Final = "DaemonFailing"
NODE_NOT_READY: Final = "NodeNotReady"
FINALIZED: Final = "Finalized"
IN_USE: Final = "InUse"
#: Pods an ``InUse`` note (and ``imexdra diagnose``) names before it gives only the count of the rest.
IN_USE_PODS_NAMED: Final = 10
CHANNEL_ALLOCATED: Final = "ChannelAllocated"
CHANNELS_EXHAUSTED: Final = "ChannelsExhausted"
ALLOCATION_MODE_UNSUPPORTED: Final = "AllocationModeUnsupported"
CHANNEL_CONFLICT: Final = "ChannelConflict"
CHANNEL_OUT_OF_POOL: Final = "ChannelOutOfPool"
ISOLATION_MISMATCH: Final = "IsolationMismatch"
ISOLATION_SWITCH_PENDING: Final = "IsolationSwitchPending"
LABEL_IGNORED: Final = "LabelIgnored"
NAMESPACE_QUOTA_EXCEEDED: Final = "NamespaceQuotaExceeded"
IMEX_PEERS_NOT_CONNECTED: Final = "IMEXPeersNotConnected"
IMEX_PEERS_CONNECTED: Final = "IMEXPeersConnected"
