"""``imexdra diagnose``: why a ComputeDomain, or the pods using its channel, are not ready.

:func:`fetch_view` reads what one domain's health depends on; :func:`diagnose` turns that into
findings (severity, message, hint) without I/O. The checks follow how a domain comes up:
the domain object itself (missing, being deleted, held in use by pods: ``lifecycle``), its global
status, its conditions (channel isolation's ``ChannelAllocated``: exhaustion, conflicts, mismatches;
docs/channel-isolation.md §7), which node's IMEX daemon cannot reach which (``imexpeers``,
docs/imex-health.md), the workload claim template,
in driver-managed mode the per-domain daemon DaemonSet and its pods, nodes of the domain that are not
Ready (``lifecycle``), then each workload pod: where it
is stuck, the node it landed on (clique label, another domain's node label) and the newest scheduler
and kubelet events quoting the reason (permanent Prepare errors end up there, DEVELOPERS.md rule 4).

Host-managed IMEX (docs/host-managed.md) has no daemons, no node labels and a status that is Ready once
the workload template exists, so the daemon, node-label and readiness checks are skipped there.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from imexdra.api.computedomain import ComputeDomain
from imexdra.api.constants import (
    COMPUTE_DOMAIN_LABEL_KEY,
    GPU_CLIQUE_NODE_LABEL_KEY,
    NODE_LABEL_KEY,
    ComputeDomainStatusValue,
    ConditionStatus,
    daemon_object_name,
)
from imexdra.api.imexpeers import IMEX_PEERS_CONNECTED
from imexdra.cli.clusterview import (
    ImexMode,
    claim_domain_uid,
    detect_imex_mode,
    event_time,
    get_or_none,
    key_of,
    labels_of,
    list_all,
    meta,
    name_of,
    pod_claim_names,
    pod_node,
    pod_ready,
    pod_state,
    pod_template_names,
)
from imexdra.cli.findings import Finding, Severity
from imexdra.cli.imexpeers import imex_peer_findings
from imexdra.cli.lifecycle import in_use_findings, lost_node_findings
from imexdra.common.kube.api import ALL_NAMESPACES, KubeApi
from imexdra.common.kube.models.apps_v1 import DaemonSet
from imexdra.common.kube.models.core_v1 import Event, Node, Pod
from imexdra.common.kube.models.resource_v1 import ResourceClaim, ResourceClaimTemplate
from imexdra.controller import reasons

#: Event reasons whose newest message is quoted for a stuck pod.
QUOTED_EVENT_REASONS = ("FailedScheduling", "FailedPrepareDynamicResources")

#: Known fragments of permanent Prepare/scheduling errors and what to do about them.
_EVENT_HINTS = (
    ("HostManagedIMEX", "host-managed IMEX supports allocationMode Single only; recreate the domain with it"),
    ("strict decoding error", "the claim's opaque config has a field this driver does not know; fix it"),
    ("NVLink clique", "schedule the pod onto nodes with an NVLink clique (nvidia.com/gpu.clique label)"),
    ("device class", "install the driver's DeviceClasses (the Helm chart creates them)"),
    ("cannot allocate all claims", "no node offers a free IMEX channel: check ResourceSlices and nodes"),
    (
        "but ComputeDomain",
        "the claim holds another ComputeDomain's channel (channel isolation): create workload claims only "
        "from the domain's own ResourceClaimTemplate",
    ),
    (
        "has no IMEX channel recorded yet",
        "the controller has not given the domain its channel yet: see the ChannelAllocated condition above",
    ),
)

#: What to do about each reason a ``False`` condition of the domain can carry (docs/channel-isolation.md §7,
#: docs/tenancy.md "Quotas").
_CONDITION_HINTS = {
    reasons.CHANNELS_EXHAUSTED: "every channel 1..channelCount-1 is held by a live ComputeDomain or a claim "
    "still allocated: delete domains (and their pods) no longer used, or raise NVreg_ImexChannelCount on "
    "every node and resources.computeDomains.imex.channelCount with it",
    reasons.ALLOCATION_MODE_UNSUPPORTED: "channel isolation gives a domain's pods its own channel only: "
    "recreate the domain with spec.channel.allocationMode: Single",
    reasons.CHANNEL_CONFLICT: "two live domains record this channel (a restore or a hand edit): delete the "
    "younger one and create it again",
    reasons.CHANNEL_OUT_OF_POOL: "the recorded channel is beyond resources.computeDomains.imex.channelCount: "
    "raise the count back, or recreate the domain",
    reasons.ISOLATION_MISMATCH: "the domain was made under the other imex.isolation setting: delete and "
    "recreate it, or set the isolation back",
    reasons.ISOLATION_SWITCH_PENDING: "new domains wait until no domain of the previous isolation is left: "
    "delete those (kubectl get computedomains -A shows a Channel column)",
    reasons.NAMESPACE_QUOTA_EXCEEDED: "the namespace is at the controller's per-namespace bound: delete a "
    "ComputeDomain of this namespace no longer used (this one is admitted when its turn comes), or ask "
    "the cluster operator to raise resources.computeDomains.maxPerNamespace (docs/tenancy.md, Quotas)",
}


@dataclass(frozen=True, slots=True)
class DomainView:
    """What one domain's health depends on, as fetched."""

    domain: ComputeDomain
    imex_mode: ImexMode
    driver_namespace: str
    #: Every ComputeDomain in the cluster, to name the owner of a conflicting node label.
    all_domains: Sequence[ComputeDomain] = ()
    template_exists: bool = True
    daemonsets: Sequence[DaemonSet] = ()
    daemon_pods: Sequence[Pod] = ()
    #: Pods and claims of the domain's namespace (workload pods are picked out of them).
    pods: Sequence[Pod] = ()
    claims: Sequence[ResourceClaim] = ()
    nodes: Mapping[str, Node] | None = None
    events: Sequence[Event] = ()


async def fetch_view(
    client: KubeApi, *, namespace: str, name: str, driver_namespace: str, imex_mode: ImexMode | None
) -> DomainView | None:
    """Read one domain and what it depends on; None if the domain does not exist."""
    domain = await get_or_none(client, ComputeDomain, name, namespace)
    if domain is None:
        return None
    uid = meta(domain).uid or ""
    template = domain.spec.channel.resource_claim_template.name if domain.spec is not None else ""
    daemon_selector = {"labels": {COMPUTE_DOMAIN_LABEL_KEY: uid}, "namespace": driver_namespace}
    return DomainView(
        domain=domain,
        imex_mode=imex_mode or await detect_imex_mode(client),
        driver_namespace=driver_namespace,
        all_domains=await list_all(client, ComputeDomain, namespace=ALL_NAMESPACES),
        template_exists=await get_or_none(client, ResourceClaimTemplate, template, namespace) is not None,
        daemonsets=await list_all(client, DaemonSet, **daemon_selector),
        daemon_pods=await list_all(client, Pod, **daemon_selector),
        pods=await list_all(client, Pod, namespace=namespace),
        claims=await list_all(client, ResourceClaim, namespace=namespace),
        nodes={name_of(n): n for n in await list_all(client, Node)},
        events=await list_all(client, Event, namespace=namespace, fields={"involvedObject.kind": "Pod"}),
    )


def diagnose(view: DomainView) -> list[Finding]:
    """All findings for the domain, most fundamental first."""
    workload = workload_pods(view.domain, view.pods, view.claims)
    return [
        *deletion_findings(view.domain),
        *in_use_findings(view.domain, view.claims),
        *status_findings(view.domain, view.imex_mode),
        *condition_findings(view.domain),
        *imex_peer_findings(view.domain),
        *template_findings(view),
        *daemon_findings(view),
        *lost_node_findings(workload, view.daemon_pods, view.nodes),
        *pod_findings(view, workload),
    ]


def missing_domain_finding(namespace: str, name: str) -> Finding:
    """The finding reported when the domain does not exist (``diagnose`` exits 2)."""
    return Finding(
        Severity.ERROR,
        f"ComputeDomain {namespace}/{name} does not exist",
        "check the name and namespace: kubectl get computedomains -A",
    )


def deletion_findings(domain: ComputeDomain) -> list[Finding]:
    """A domain with a deletionTimestamp is waiting on finalizers; say which."""
    metadata = meta(domain)
    if metadata.deletionTimestamp is None:
        return []
    finalizers = ", ".join(metadata.finalizers or []) or "none"
    return [
        Finding(
            Severity.ERROR,
            f"ComputeDomain is being deleted (since {_when(metadata.deletionTimestamp)}; "
            f"finalizers: {finalizers})",
            "the controller removes its finalizer once the daemon objects and claim templates are gone; "
            "if it is not running, the deletion hangs: check the compute-domain-controller pod",
        )
    ]


def status_findings(domain: ComputeDomain, mode: ImexMode) -> list[Finding]:
    """Global status: missing, or NotReady because too few nodes joined or some daemons are NotReady."""
    status, spec = domain.status, domain.spec
    if status is None:
        return [
            Finding(
                Severity.WARNING,
                "ComputeDomain has no status yet",
                "the controller writes status on its first reconcile: is compute-domain-controller running?",
            )
        ]
    if mode is ImexMode.HOST_MANAGED:
        if status.status is ComputeDomainStatusValue.READY:
            return [
                Finding(
                    Severity.INFO,
                    "status Ready (host-managed IMEX: means admitted, not that host nvidia-imex is healthy)",
                    "check host IMEX with systemctl status nvidia-imex and nvidia-imex-ctl -N",
                )
            ]
        return [
            Finding(
                Severity.WARNING,
                "status NotReady: under host-managed IMEX a domain is Ready once its workload "
                "ResourceClaimTemplate exists",
                "a template of that name the domain does not own blocks it (a ClaimTemplateConflict event "
                "names it: delete or rename it); otherwise check compute-domain-controller",
            )
        ]
    if status.status is not ComputeDomainStatusValue.NOT_READY:
        return []
    findings = []
    wanted = spec.num_nodes if spec is not None else 0
    if len(status.nodes) < wanted:
        joined = ", ".join(n.name for n in status.nodes) or "none"
        findings.append(
            Finding(
                Severity.ERROR,
                f"status NotReady: {len(status.nodes)} of numNodes={wanted} nodes have joined ({joined})",
                "a node joins when a workload pod of this domain is prepared there and its IMEX daemon "
                "starts; see the pod findings below",
            )
        )
    not_ready = sorted(n.name for n in status.nodes if n.status is ComputeDomainStatusValue.NOT_READY)
    if not_ready:
        findings.append(
            Finding(
                Severity.ERROR,
                f"IMEX daemons NotReady on: {', '.join(not_ready)}",
                "inspect the daemon pods in the driver namespace (kubectl logs) for nvidia-imex errors",
            )
        )
    return findings


def condition_findings(domain: ComputeDomain) -> list[Finding]:
    """Each condition of the domain that is not True, with its reason, message and what to do.

    ``IMEXPeersConnected`` is left to ``imex_peer_findings``, which names every broken pair.
    """
    status = domain.status
    return [
        Finding(
            Severity.ERROR,
            f"condition {condition.type} is {condition.status}: {condition.reason}: {condition.message}",
            _CONDITION_HINTS.get(condition.reason, "kubectl describe computedomain shows its events"),
        )
        for condition in (status.conditions if status is not None else ())
        if condition.status != ConditionStatus.TRUE and condition.type != IMEX_PEERS_CONNECTED
    ]


def template_findings(view: DomainView) -> list[Finding]:
    """The workload ResourceClaimTemplate must exist for pods to get their channel claim."""
    spec = view.domain.spec
    if view.template_exists or spec is None or meta(view.domain).deletionTimestamp is not None:
        return []
    name = f"{meta(view.domain).namespace}/{spec.channel.resource_claim_template.name}"
    return [
        Finding(
            Severity.ERROR,
            f"workload ResourceClaimTemplate {name} does not exist",
            "the controller creates it from spec.channel; pods naming it cannot get a claim until then",
        )
    ]


def daemon_findings(view: DomainView) -> list[Finding]:
    """Driver-managed mode: the domain's daemon DaemonSet must exist and its pods must be Ready."""
    if view.imex_mode is ImexMode.HOST_MANAGED:
        return []
    findings = []
    if view.imex_mode is ImexMode.UNKNOWN:
        findings.append(
            Finding(
                Severity.WARNING,
                "cannot tell the IMEX mode: DeviceClass compute-domain-default-channel.nvidia.com is missing",
                "is the driver installed? pass --imex-mode to skip detection",
            )
        )
    name = f"{view.driver_namespace}/{daemon_object_name(meta(view.domain).uid or '')}"
    if not view.daemonsets and meta(view.domain).deletionTimestamp is None:
        findings.append(
            Finding(
                Severity.ERROR,
                f"daemon DaemonSet {name} does not exist",
                "the controller creates it for every driver-managed domain: check compute-domain-controller "
                "and that --driver-namespace names the driver's namespace",
            )
        )
    for pod in sorted(view.daemon_pods, key=name_of):
        if not pod_ready(pod):
            findings.append(
                Finding(
                    Severity.ERROR,
                    f"daemon pod {key_of(pod)} is not Ready ({pod_state(pod)})",
                    "kubectl logs it: the IMEX daemon waits for its peers and for nvidia-imex to connect",
                )
            )
    return findings


def workload_pods(domain: ComputeDomain, pods: Iterable[Pod], claims: Iterable[ResourceClaim]) -> list[Pod]:
    """Pods of the domain: claims from its channel template, or claims configured with its UID."""
    template = domain.spec.channel.resource_claim_template.name if domain.spec is not None else None
    uid = meta(domain).uid
    own_claims = {name_of(c) for c in claims if uid and claim_domain_uid(c) == uid}
    return sorted(
        (p for p in pods if template in pod_template_names(p) or pod_claim_names(p) & own_claims),
        key=name_of,
    )


def pod_findings(view: DomainView, workload: Sequence[Pod]) -> list[Finding]:
    """Stuck workload pods, the nodes they landed on, and the events explaining them."""
    if not workload:
        template = view.domain.spec.channel.resource_claim_template.name if view.domain.spec else "?"
        return [Finding(Severity.INFO, f"no pods use the domain's channel template {template}")]
    findings: list[Finding] = []
    nodes = view.nodes or {}
    owners = {meta(d).uid: key_of(d) for d in view.all_domains}
    own_uid = meta(view.domain).uid
    flagged: set[str] = set()
    for pod in workload:
        pending = pod.status is None or pod.status.phase in (None, "Pending")
        node_name = pod_node(pod)
        node = nodes.get(node_name) if node_name else None
        if node is not None and node_name not in flagged and GPU_CLIQUE_NODE_LABEL_KEY not in labels_of(node):
            flagged.add(node_name or "")
            findings.append(
                Finding(
                    Severity.WARNING,
                    f"node {node_name} (pod {name_of(pod)}) has no {GPU_CLIQUE_NODE_LABEL_KEY} label",
                    "nodes without an NVLink clique cannot join an IMEX domain; check GPU Feature "
                    "Discovery and the node's NVLink fabric",
                )
            )
        label = labels_of(node).get(NODE_LABEL_KEY) if node is not None else None
        if pending and label and label != own_uid and view.imex_mode is not ImexMode.HOST_MANAGED:
            findings.append(
                Finding(
                    Severity.ERROR,
                    f"node {node_name} is labelled {NODE_LABEL_KEY}={label} "
                    f"({owners.get(label, 'unknown or deleted domain')}) while pod {name_of(pod)} "
                    "of this domain is pending there",
                    "a node serves one ComputeDomain at a time: wait for the other domain's pods to end, "
                    "or remove a stale label whose domain is gone",
                )
            )
        if pending:
            findings.append(_stuck_pod_finding(pod, view.events))
    return findings


def _stuck_pod_finding(pod: Pod, events: Iterable[Event]) -> Finding:
    quoted = newest_events(pod, events)
    lines = [f"pod {name_of(pod)} is stuck: {pod_state(pod)}"]
    lines += [f'  {event.reason}: "{(event.message or "").strip()}"' for event in quoted]
    hint = (
        "; ".join(event_hints(e.message or "" for e in quoted))
        or "kubectl describe pod shows the full event history"
    )
    return Finding(Severity.ERROR, "\n".join(lines), hint)


def event_hints(messages: Iterable[str]) -> list[str]:
    """What to do about known permanent Prepare and scheduling errors quoted in ``messages``."""
    quoted = list(messages)
    return [hint for fragment, hint in _EVENT_HINTS if any(fragment in message for message in quoted)]


def newest_events(pod: Pod, events: Iterable[Event]) -> list[Event]:
    """The newest event of each quoted reason about this pod (by UID when the event carries one)."""
    metadata = meta(pod)
    newest: dict[str, Event] = {}
    for event in events:
        target = event.involvedObject
        if target.kind != "Pod" or target.name != metadata.name:
            continue
        if target.uid and metadata.uid and target.uid != metadata.uid:
            continue  # about an earlier pod of the same name
        reason = event.reason or ""
        if reason in QUOTED_EVENT_REASONS and (
            reason not in newest or event_time(event) >= event_time(newest[reason])
        ):
            newest[reason] = event
    return [newest[reason] for reason in QUOTED_EVENT_REASONS if reason in newest]


def has_problems(findings: Iterable[Finding]) -> bool:
    """Whether any finding is a warning or an error."""
    return any(f.is_problem for f in findings)


def render_text(subject: str, findings: Sequence[Finding], *, kind: str = "ComputeDomain") -> str:
    """A head line naming ``kind subject``, then one block per finding: ``[SEVERITY] message``, a hint."""
    if not has_problems(findings):
        head = f"{kind} {subject}: no problem found"
    else:
        head = f"{kind} {subject}: {sum(f.is_problem for f in findings)} problem(s) found"
    blocks = [head]
    for finding in findings:
        block = f"[{finding.severity.upper()}] {finding.message}"
        if finding.hint:
            block += f"\n    hint: {finding.hint}"
        blocks.append(block)
    return "\n".join(blocks)


def _when(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
