"""Why a workload's IMEX claim is not satisfied: the findings of ``imexdra diagnose TYPE/NAME``, without I/O.

Each claim a consumer (:mod:`workloads`) names is checked once, however many pods share it, in the
order a claim comes to life:

1. the ResourceClaimTemplate (or ResourceClaim) it names exists; a missing template is usually a
   ComputeDomain that was never created (the controller makes the template from one);
2. every DeviceClass its requests ask for exists (the finding lists the cluster's ComputeDomain
   classes);
3. its opaque configs for ``compute-domain.nvidia.com`` decode with the driver's own strict decoding
   (:func:`imexdra.api.opaque.decode_opaque_config`), so the error printed is the one Prepare fails
   with;
4. a ComputeDomain stands behind it: the ``domainID`` of its ``ComputeDomainChannelConfig`` is a live
   domain's UID, and a domain naming the template owns it.

Claims that are neither from our DeviceClasses nor configured for our driver (a GPU claim) are not
IMEX claims and are only mentioned. A pod whose claims pass all of that but that is still Pending is
reported with where its claim is (not created, not allocated, allocated to which channel) and its
newest Warning events from the scheduler, the resourceclaim controller and the kubelet (Prepare
errors of the driver reach the pod that way, DEVELOPERS.md rule 4). Where no domain stands behind a
template, a :class:`~imexdra.cli.suggest.Suggestion` carries the YAML that would work.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from imexdra.api.computedomain import ComputeDomain
from imexdra.api.constants import (
    DEVICE_CLASS_CHANNEL,
    DEVICE_CLASS_DAEMON,
    DEVICE_CLASS_DEFAULT_CHANNEL,
    DRIVER_NAME,
)
from imexdra.api.opaque import ComputeDomainChannelConfig, decode_opaque_config
from imexdra.cli.clusterview import driver_devices, event_time, key_of, meta, name_of, pod_state
from imexdra.cli.diagnose import event_hints
from imexdra.cli.findings import Finding, Severity
from imexdra.cli.suggest import Suggestion
from imexdra.cli.targets import Target, TargetKind
from imexdra.cli.workloads import Consumer, WorkloadView
from imexdra.common.errors import ConfigError
from imexdra.common.kube.models.core_v1 import Event, Pod
from imexdra.common.kube.models.resource_v1 import (
    DeviceClaim,
    DeviceClass,
    ResourceClaim,
    ResourceClaimTemplate,
)

#: The chart's DeviceClasses; a cluster class whose CEL selector names the driver counts as well.
KNOWN_DEVICE_CLASSES = (DEVICE_CLASS_DEFAULT_CHANNEL, DEVICE_CLASS_CHANNEL, DEVICE_CLASS_DAEMON)
_CHANNEL_CLASSES = (DEVICE_CLASS_DEFAULT_CHANNEL, DEVICE_CLASS_CHANNEL)
#: Warning reasons quoted for a stuck pod: scheduling, claim creation from the template, Prepare.
QUOTED_WARNINGS = ("FailedPrepareDynamicResources", "FailedScheduling", "FailedResourceClaimCreation")
_MAX_NAMED_USERS = 3


@dataclass(frozen=True, slots=True)
class Source:
    """What a pod's claim entry points at: a template (``resourceClaimTemplateName``) or a claim."""

    kind: str
    name: str
    namespace: str

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass(slots=True)
class Verdict:
    """The findings about one source, and what they mean for the pods using it."""

    findings: list[Finding] = field(default_factory=list)
    #: An IMEX claim: asks for one of our DeviceClasses or carries our opaque config (or is missing).
    imex: bool = True
    #: No ComputeDomain stands behind it: suggest the YAML that would work.
    needs_domain: bool = False

    @property
    def blocking(self) -> bool:
        """An error here keeps every pod using the source from getting its claim."""
        return any(f.severity is Severity.ERROR for f in self.findings)


@dataclass(frozen=True, slots=True)
class WorkloadReport:
    """All findings for a target, what was checked, and the YAML that would work."""

    findings: list[Finding]
    checked: list[str]
    suggestions: list[Suggestion]


def diagnose_workload(view: WorkloadView) -> WorkloadReport:
    """All findings for the view's consumers: each claim source once, then each consumer."""
    namespace = view.target.namespace
    users: dict[Source, list[str]] = {}
    for consumer in view.consumers:
        for entry in consumer.spec.resourceClaims or []:
            source = source_of(entry.resourceClaimTemplateName, entry.resourceClaimName, namespace)
            users.setdefault(source, []).append(f"{consumer.label} (claim {entry.name})")
    verdicts = {source: check_source(source, view, used_by=names) for source, names in users.items()}
    findings = [finding for verdict in verdicts.values() for finding in verdict.findings]
    suggestions: dict[str, Suggestion] = {}
    checked: list[str] = []
    for consumer in view.consumers:
        entries = list(consumer.spec.resourceClaims or [])
        mine = [
            (
                entry.name,
                verdicts[source_of(entry.resourceClaimTemplateName, entry.resourceClaimName, namespace)],
            )
            for entry in entries
        ]
        imex = [(name, verdict) for name, verdict in mine if verdict.imex]
        if not imex and view.target.kind is TargetKind.NAMESPACE:
            continue  # a pod of the namespace with only other drivers' claims is none of our business
        checked.append(consumer.label)
        for entry, (_, verdict) in zip(entries, mine, strict=True):
            template = entry.resourceClaimTemplateName
            if verdict.needs_domain and template and template not in suggestions:
                suggestions[template] = _suggestion(view, consumer, template, entry.name)
        if not imex:
            findings.append(_no_imex_claim(consumer))
            template = f"{view.target.name}-channel"
            suggestions.setdefault(template, _suggestion(view, consumer, template, "imex"))
        elif consumer.pod is not None and not any(verdict.blocking for _, verdict in imex):
            findings.extend(_stuck(consumer.pod, [name for name, _ in imex], view))
    if view.from_templates:
        plural = "s" if len(view.consumers) > 1 else ""
        message = f"{view.target.ref} has no pods yet: checked its pod template{plural}"
        findings.insert(0, Finding(Severity.INFO, message))
    if not checked:
        what = "pods of the namespace" if view.target.kind is TargetKind.NAMESPACE else "pod templates"
        findings.append(Finding(Severity.INFO, f"no {what} use an IMEX channel claim"))
    return WorkloadReport(findings, checked, list(suggestions.values()))


def missing_target_finding(target: Target) -> Finding:
    """The finding reported when the pod, workload or namespace does not exist (``diagnose`` exits 4)."""
    hint = f"check the name and namespace: kubectl get {target.kind.lower()} -n {target.namespace}"
    if target.kind is TargetKind.MPIJOB:
        hint += " (MPIJobs need the MPI Operator: kubectl get crd mpijobs.kubeflow.org)"
    if target.kind is TargetKind.NAMESPACE:
        hint = "check the name: kubectl get namespaces"
    return Finding(Severity.ERROR, f"{target.kind} {target.key} does not exist", hint)


def source_of(template: str | None, claim: str | None, namespace: str) -> Source:
    """The source a pod claim entry names (an entry names exactly one)."""
    if template:
        return Source("ResourceClaimTemplate", template, namespace)
    return Source("ResourceClaim", claim or "", namespace)


def check_source(source: Source, view: WorkloadView, *, used_by: Sequence[str]) -> Verdict:
    """Findings about one template or claim, as used by ``used_by``."""
    where = f"{source} (used by {_names(used_by)})"
    is_template = source.kind == "ResourceClaimTemplate"
    naming = domains_naming(source.name, source.namespace, view.domains) if is_template else []
    found = (view.templates if is_template else view.claims) or {}
    obj = found.get(source.name)
    if obj is None:
        return _missing_source(source, where, naming, view.domains)
    return check_devices(_devices(obj), where, naming, view)


def check_devices(
    devices: DeviceClaim | None, where: str, naming: Sequence[ComputeDomain], view: WorkloadView
) -> Verdict:
    """DeviceClasses, opaque configs and the ComputeDomain behind one template's or claim's devices."""
    verdict = Verdict()
    present = {name_of(dc) for dc in view.device_classes}
    ours = our_device_classes(view.device_classes)
    requested = requested_classes(devices)
    missing = [(request, device_class) for request, device_class in requested if device_class not in present]
    verdict.findings.extend(
        _missing_class(device_class, request, where, ours) for request, device_class in missing
    )
    domain_ids: list[str] = []
    rejected = False
    configs = [c.opaque for c in (devices.config if devices is not None else None) or [] if c.opaque]
    for opaque in (o for o in configs if o.driver == DRIVER_NAME):
        try:
            decoded = decode_opaque_config(opaque.parameters)
        except ConfigError as error:
            rejected = True
            verdict.findings.append(_rejected_config(where, error))
            continue
        if isinstance(decoded, ComputeDomainChannelConfig):
            domain_ids.append(decoded.domain_id)
        else:
            verdict.findings.append(_daemon_config(where))
    verdict.imex = (
        bool(missing)  # a misspelt class cannot tell; the pods are stuck either way
        or any(o.driver == DRIVER_NAME for o in configs)
        or any(c in ours for _, c in requested)
    )
    if not verdict.imex:
        verdict.findings.append(Finding(Severity.INFO, f"{where} is not an IMEX channel claim"))
    elif not rejected:
        asks_channel = any(c in _CHANNEL_CLASSES for _, c in requested)
        findings, verdict.needs_domain = _domain_findings(
            where, domain_ids, naming, view.domains, asks_channel
        )
        verdict.findings.extend(findings)
    return verdict


def _devices(obj: ResourceClaimTemplate | ResourceClaim) -> DeviceClaim | None:
    if isinstance(obj, ResourceClaimTemplate):
        spec = obj.spec.spec if obj.spec is not None else None
    else:
        spec = obj.spec
    return spec.devices if spec is not None else None


def requested_classes(devices: DeviceClaim | None) -> list[tuple[str, str]]:
    """``(request, DeviceClass)`` of every request and first-available subrequest."""
    pairs: list[tuple[str, str]] = []
    for request in (devices.requests if devices is not None else None) or []:
        if request.exactly is not None:
            pairs.append((request.name, request.exactly.deviceClassName))
        for sub in request.firstAvailable or []:
            pairs.append((f"{request.name}/{sub.name}", sub.deviceClassName))
    return pairs


def our_device_classes(classes: Iterable[DeviceClass]) -> list[str]:
    """The cluster's ComputeDomain DeviceClasses: the chart's names, or a CEL selector naming the driver."""
    found = set()
    for device_class in classes:
        selectors = device_class.spec.selectors if device_class.spec is not None else None
        expressions = [s.cel.expression for s in selectors or [] if s.cel is not None]
        if name_of(device_class) in KNOWN_DEVICE_CLASSES or any(DRIVER_NAME in e for e in expressions):
            found.add(name_of(device_class))
    return sorted(found)


def domains_naming(template: str, namespace: str, domains: Iterable[ComputeDomain]) -> list[ComputeDomain]:
    """The domains of ``namespace`` whose ``spec.channel.resourceClaimTemplate.name`` is ``template``."""
    return [
        d
        for d in domains
        if meta(d).namespace == namespace
        and d.spec is not None
        and d.spec.channel.resource_claim_template.name == template
    ]


def _missing_source(
    source: Source, where: str, naming: Sequence[ComputeDomain], domains: Sequence[ComputeDomain]
) -> Verdict:
    if source.kind != "ResourceClaimTemplate":
        hint = (
            "create it, or name a ResourceClaimTemplate (resourceClaimTemplateName) so each pod gets its own"
        )
        return Verdict([Finding(Severity.ERROR, f"{where} does not exist", hint)])
    if naming:
        domain = naming[0]
        doing = "is being deleted" if meta(domain).deletionTimestamp else "names it"
        return Verdict(
            [
                Finding(
                    Severity.ERROR,
                    f"{where} does not exist, though ComputeDomain {key_of(domain)} {doing}",
                    f"the controller creates the template from the domain: imexdra diagnose "
                    f"computedomain/{name_of(domain)} -n {source.namespace}",
                )
            ]
        )
    others = sorted(
        f"{d.spec.channel.resource_claim_template.name} ({name_of(d)})"
        for d in domains
        if meta(d).namespace == source.namespace and d.spec is not None
    )
    named = f"; the ComputeDomains here name: {', '.join(others)}" if others else ""
    message = f"{where} does not exist, and no ComputeDomain in {source.namespace} names it{named}"
    hint = (
        "create a ComputeDomain with spec.channel.resourceClaimTemplate.name: "
        f"{source.name} (YAML below); its controller creates the template"
    )
    return Verdict([Finding(Severity.ERROR, message, hint)], needs_domain=True)


def _domain_findings(
    where: str,
    domain_ids: Sequence[str],
    naming: Sequence[ComputeDomain],
    domains: Sequence[ComputeDomain],
    asks_channel: bool,
) -> tuple[list[Finding], bool]:
    """Findings about the domain behind the source, and whether a new domain would fix it."""
    owner = naming[0] if naming else None
    if not domain_ids:
        if owner is not None:
            message = f"{where} carries no ComputeDomainChannelConfig: it is not the template of "
            return [
                Finding(Severity.ERROR, f"{message}ComputeDomain {key_of(owner)}, which names it", _CONFLICT)
            ], False
        if not asks_channel:
            return [], False
        message = (
            f"{where} asks for an IMEX channel but carries no ComputeDomainChannelConfig: "
            "no ComputeDomain is behind it"
        )
        hint = "a hand-written template: delete it and create the ComputeDomain below, which then gets one"
        return [Finding(Severity.ERROR, message, hint)], True
    by_uid = {meta(d).uid: d for d in domains if meta(d).uid}
    findings, orphaned = [], False
    for domain_id in domain_ids:
        domain = by_uid.get(domain_id)
        if owner is not None and domain is not owner:
            message = (
                f"{where} names domainID {domain_id}, not the UID of ComputeDomain {key_of(owner)}, "
                "which names it"
            )
            findings.append(Finding(Severity.ERROR, message, _CONFLICT))
        elif domain is None:
            orphaned = True
            message = (
                f"{where} names domainID {domain_id} in its ComputeDomainChannelConfig, "
                "but no ComputeDomain has that UID"
            )
            findings.append(Finding(Severity.ERROR, message, _ORPHANED))
        elif meta(domain).deletionTimestamp is not None:
            hint = "new pods cannot join a domain being deleted: recreate it once it is gone"
            message = f"ComputeDomain {key_of(domain)} behind {where} is being deleted"
            findings.append(Finding(Severity.ERROR, message, hint))
        else:
            state = domain.status.status if domain.status is not None else "no status yet"
            message = f"ComputeDomain {key_of(domain)} (status {state}) is behind {where}"
            hint = f"imexdra diagnose computedomain/{name_of(domain)} -n {meta(domain).namespace} explains it"
            findings.append(Finding(Severity.INFO, message, hint))
    return findings, orphaned


_CONFLICT = (
    "a template that a ComputeDomain names but does not own blocks it (ClaimTemplateConflict): delete "
    "the template and the controller writes the domain's own"
)
_ORPHANED = (
    "the domain was deleted, or the template was copied from another domain or cluster: delete the "
    "template and create the ComputeDomain below, whose controller writes it with its UID"
)


def _missing_class(device_class: str, request: str, where: str, ours: Sequence[str]) -> Finding:
    message = f"DeviceClass {device_class} (request {request} of {where}) does not exist"
    if ours:
        hint = f"the ComputeDomain DeviceClasses in this cluster are: {', '.join(ours)}"
    else:
        hint = (
            "this cluster has no ComputeDomain DeviceClass: is the driver installed? (its chart makes them)"
        )
    return Finding(Severity.ERROR, message, hint)


def _rejected_config(where: str, error: ConfigError) -> Finding:
    return Finding(
        Severity.ERROR,
        f"{where} has an opaque config the driver rejects: error decoding config parameters: {error}",
        "Prepare fails with this error and is not retried: fix the config (a ComputeDomain's controller "
        "writes a valid one; hand-written or edited templates are the usual cause)",
    )


def _daemon_config(where: str) -> Finding:
    return Finding(
        Severity.WARNING,
        f"{where} carries a ComputeDomainDaemonConfig, which only the IMEX daemons' own claims use",
        "workload claims carry a ComputeDomainChannelConfig: take the template a ComputeDomain creates",
    )


def _no_imex_claim(consumer: Consumer) -> Finding:
    return Finding(
        Severity.WARNING,
        f"{consumer.label} asks for no IMEX channel: none of its resourceClaims is a ComputeDomain's",
        "add a claim from a ComputeDomain's ResourceClaimTemplate (YAML below)",
    )


def _suggestion(view: WorkloadView, consumer: Consumer, template: str, claim: str) -> Suggestion:
    containers = consumer.spec.containers or []
    return Suggestion(
        namespace=view.target.namespace,
        template=template,
        claim=claim,
        container=containers[0].name if containers else "main",
        location=_location(view, consumer),
    )


def _location(view: WorkloadView, consumer: Consumer) -> str:
    target = view.target
    if target.kind is TargetKind.MPIJOB:
        return f"spec.mpiReplicaSpecs.<Launcher|Worker>.template.spec of {target.ref}"
    if target.kind in (TargetKind.JOB, TargetKind.DEPLOYMENT):
        return f"spec.template.spec of {target.ref}"
    return f"the spec of {consumer.label} (in its workload: the pod template's spec)"


def _stuck(pod: Pod, claim_entries: Sequence[str], view: WorkloadView) -> list[Finding]:
    """A Pending pod whose IMEX claims look right: where each claim is, and the newest Warning events."""
    phase = pod.status.phase if pod.status is not None else None
    if phase not in (None, "Pending"):
        return []
    statuses = {
        s.name: s.resourceClaimName for s in (pod.status.resourceClaimStatuses if pod.status else None) or []
    }
    direct = {e.name: e.resourceClaimName for e in (pod.spec.resourceClaims if pod.spec else None) or []}
    lines = [f"pod {name_of(pod)} is stuck: {pod_state(pod)}"]
    allocated = False
    for entry in claim_entries:
        claim_name = direct.get(entry) or statuses.get(entry)
        claim = (view.claims or {}).get(claim_name or "")
        if claim is None:
            lines.append(f"  claim {entry}: no ResourceClaim yet")
            continue
        devices = driver_devices(claim)
        allocated = allocated or bool(devices)
        where = f"allocated {', '.join(devices)}" if devices else "not allocated yet"
        lines.append(f"  claim {entry}: ResourceClaim {claim_name} {where}")
    warnings = recent_warnings(pod, view.events)
    lines += [f'  Warning {e.reason}: "{(e.message or "").strip()}"' for e in warnings]
    hints = event_hints(e.message or "" for e in warnings)
    if allocated and any(e.reason == "FailedPrepareDynamicResources" for e in warnings):
        hints.insert(
            0, "the channel is allocated but the kubelet plugin on the pod's node failed to prepare it"
        )
    hint = "; ".join(hints) or "kubectl describe pod shows the full event history"
    return [Finding(Severity.ERROR, "\n".join(lines), hint)]


def recent_warnings(pod: Pod, events: Iterable[Event]) -> list[Event]:
    """The newest Warning of each quoted reason (or naming the driver) about this pod, newest first."""
    metadata = meta(pod)
    newest: dict[str, Event] = {}
    for event in events:
        target = event.involvedObject
        if event.type != "Warning" or target.kind != "Pod" or target.name != metadata.name:
            continue
        if target.uid and metadata.uid and target.uid != metadata.uid:
            continue  # about an earlier pod of the same name
        reason = event.reason or ""
        if reason not in QUOTED_WARNINGS and DRIVER_NAME not in (event.message or ""):
            continue
        if reason not in newest or event_time(event) >= event_time(newest[reason]):
            newest[reason] = event
    return sorted(newest.values(), key=event_time, reverse=True)


def _names(labels: Sequence[str]) -> str:
    shown = ", ".join(labels[:_MAX_NAMED_USERS])
    more = len(labels) - _MAX_NAMED_USERS
    return f"{shown} and {more} more" if more > 0 else shown
