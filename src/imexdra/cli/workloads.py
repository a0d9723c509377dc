"""Reading what a workload's IMEX claims depend on, for ``imexdra diagnose TYPE/NAME`` (:mod:`claimchecks`).

A pod, a workload (Job, MPIJob ``kubeflow.org/v2beta1``, Deployment) or a namespace is turned into
*consumers*: the pods themselves, or, while a workload has no pods yet, its pod templates. A workload
finds its pods the way its controller labels them: a Job by ``batch.kubernetes.io/job-name``, an
MPIJob by ``training.kubeflow.org/job-name``, a Deployment by ``spec.selector.matchLabels``.

Everything is decoded into types here, once: the generated models for the built-in kinds
(``common.kube.models``), and the MPIJob (a CRD of the MPI Operator's, kept as its metadata and
untyped spec) into a :class:`Workload` with typed pod templates. The checks never
see a raw dict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from imexdra.api.computedomain import ComputeDomain
from imexdra.cli.clusterview import get_or_none, list_all, name_of
from imexdra.cli.targets import Target, TargetKind
from imexdra.common.kube.api import ALL_NAMESPACES, KubeApi
from imexdra.common.kube.models.apps_v1 import Deployment
from imexdra.common.kube.models.batch_v1 import Job
from imexdra.common.kube.models.core_v1 import Event, Namespace, Pod, PodSpec, PodTemplateSpec
from imexdra.common.kube.models.meta_v1 import ObjectMeta
from imexdra.common.kube.models.resource_v1 import DeviceClass, ResourceClaim, ResourceClaimTemplate
from imexdra.common.kube.resource import ApiInfo, Model

#: Labels the Job controller and the MPI Operator put on the pods they create.
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
MPIJOB_NAME_LABEL = "training.kubeflow.org/job-name"


class MPIJob(Model, kw_only=True):
    """A ``kubeflow.org/v2beta1`` MPIJob: its metadata, and its spec as the API returns it."""

    _api_info: ClassVar[ApiInfo] = ApiInfo(
        group="kubeflow.org", version="v2beta1", kind="MPIJob", plural="mpijobs", namespaced=True
    )

    apiVersion: str | None = None  # noqa: N815 (the wire name)
    kind: str | None = None
    metadata: ObjectMeta | None = None
    spec: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Workload:
    """A workload as far as its claims go: how its pods are labelled, and the pod templates they come from."""

    selector: Mapping[str, str]
    #: ``(role, pod spec)``; the role is the MPIJob replica type (``Launcher``, ``Worker``), else "".
    templates: Sequence[tuple[str, PodSpec]]


@dataclass(frozen=True, slots=True)
class Consumer:
    """Something whose ``resourceClaims`` are checked: a pod, or a workload's pod template."""

    #: How findings name it: ``pod worker-0``, ``pod template of job/train (Worker)``.
    label: str
    spec: PodSpec
    pod: Pod | None = None


@dataclass(frozen=True, slots=True)
class WorkloadView:
    """What a workload's claims depend on, as fetched for one target."""

    target: Target
    consumers: Sequence[Consumer]
    #: True when the workload had no pods and its pod templates were checked instead.
    from_templates: bool = False
    #: Claim templates and claims of the target's namespace, by name.
    templates: Mapping[str, ResourceClaimTemplate] | None = None
    claims: Mapping[str, ResourceClaim] | None = None
    #: ComputeDomains of every namespace: a template's domainID may name one anywhere.
    domains: Sequence[ComputeDomain] = ()
    device_classes: Sequence[DeviceClass] = ()
    #: Pod events of the target's namespace.
    events: Sequence[Event] = ()


def decode_job(job: Job) -> Workload:
    """A Job's pods carry its name in ``batch.kubernetes.io/job-name``."""
    template = job.spec.template if job.spec is not None else None
    return Workload({JOB_NAME_LABEL: name_of(job)}, _specs(("", template)))


def decode_deployment(deployment: Deployment) -> Workload:
    """A Deployment's pods match its ``spec.selector.matchLabels``."""
    spec = deployment.spec
    labels = (spec.selector.matchLabels if spec is not None else None) or {}
    return Workload(dict(labels), _specs(("", spec.template if spec is not None else None)))


def decode_mpijob(mpijob: MPIJob) -> Workload:
    """An MPIJob's pods carry its name in ``training.kubeflow.org/job-name``; a template per replica type."""
    replicas = (mpijob.spec or {}).get("mpiReplicaSpecs") or {}
    templates: list[tuple[str, PodTemplateSpec | None]] = [
        (str(role), _pod_template(spec["template"]))
        for role, spec in sorted(replicas.items())
        if isinstance(spec, dict) and isinstance(spec.get("template"), dict)
    ]
    return Workload({MPIJOB_NAME_LABEL: name_of(mpijob)}, _specs(*templates))


def _pod_template(raw: dict[str, Any]) -> PodTemplateSpec:
    return PodTemplateSpec.from_dict(raw)


def _specs(*templates: tuple[str, PodTemplateSpec | None]) -> list[tuple[str, PodSpec]]:
    return [(role, template.spec) for role, template in templates if template and template.spec is not None]


_WORKLOADS: dict[TargetKind, tuple[Any, Any]] = {
    TargetKind.JOB: (Job, decode_job),
    TargetKind.MPIJOB: (MPIJob, decode_mpijob),
    TargetKind.DEPLOYMENT: (Deployment, decode_deployment),
}


async def fetch_consumers(client: KubeApi, target: Target) -> tuple[list[Consumer], bool] | None:
    """The target's consumers, and whether they are pod templates; None if the target does not exist."""
    namespace = target.namespace
    if target.kind is TargetKind.NAMESPACE:
        if await get_or_none(client, Namespace, namespace, "") is None:
            return None
        pods = await list_all(client, Pod, namespace=namespace)
        return [pod_consumer(p) for p in sorted(pods, key=name_of) if _has_claims(p)], False
    if target.kind is TargetKind.POD:
        pod = await get_or_none(client, Pod, target.name, namespace)
        return None if pod is None else ([pod_consumer(pod)], False)
    resource, decode = _WORKLOADS[target.kind]
    found = await get_or_none(client, resource, target.name, namespace)
    if found is None:
        return None
    workload: Workload = decode(found)
    # An empty selector (a Deployment selecting by matchExpressions only) would list every pod here.
    selector = dict(workload.selector)
    pods = await list_all(client, Pod, namespace=namespace, labels=selector) if selector else []
    if pods:
        return [pod_consumer(p) for p in sorted(pods, key=name_of)], False
    return [template_consumer(target, role, spec) for role, spec in workload.templates], True


async def fetch_workload_view(client: KubeApi, target: Target) -> WorkloadView | None:
    """Read the target's consumers and everything their claims depend on; None if the target is absent."""
    found = await fetch_consumers(client, target)
    if found is None:
        return None
    consumers, from_templates = found
    namespace = target.namespace
    return WorkloadView(
        target=target,
        consumers=consumers,
        from_templates=from_templates,
        templates={name_of(t): t for t in await list_all(client, ResourceClaimTemplate, namespace=namespace)},
        claims={name_of(c): c for c in await list_all(client, ResourceClaim, namespace=namespace)},
        domains=await list_all(client, ComputeDomain, namespace=ALL_NAMESPACES),
        device_classes=await list_all(client, DeviceClass),
        events=await list_all(client, Event, namespace=namespace, fields={"involvedObject.kind": "Pod"}),
    )


def pod_consumer(pod: Pod) -> Consumer:
    """A pod as a consumer of its claims."""
    return Consumer(label=f"pod {name_of(pod)}", spec=pod.spec or PodSpec(containers=[]), pod=pod)


def template_consumer(target: Target, role: str, spec: PodSpec) -> Consumer:
    """A workload's pod template as a consumer (its pods do not exist yet)."""
    suffix = f" ({role})" if role else ""
    return Consumer(label=f"pod template of {target.ref}{suffix}", spec=spec)


def _has_claims(pod: Pod) -> bool:
    return bool(pod.spec is not None and pod.spec.resourceClaims)
