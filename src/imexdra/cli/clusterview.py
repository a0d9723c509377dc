"""What ``imexdra status`` and ``imexdra diagnose`` share: client setup, object accessors, tables.

- :func:`resolve_kubeconfig` and :func:`run_with_client` connect the way kubectl users expect and turn
  connection and API failures into one clear CLI error (exit code 3);
- the accessors read the few fields both commands need from typed objects, tolerating the ``None``s
  the API models allow, so the report modules stay free of defensive noise;
- :func:`detect_imex_mode` tells driver-managed from host-managed installs by the DeviceClasses the
  chart installs (host-managed IMEX omits the daemon class, docs/host-managed.md), since the CLI
  cannot see the controller's feature gates;
- :func:`format_table` renders aligned text tables.

Nothing here writes to the cluster: both commands are read-only.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

import click

from imexdra.api.constants import (
    COMPUTE_DOMAIN_LABEL_KEY,
    DEVICE_CLASS_DAEMON,
    DEVICE_CLASS_DEFAULT_CHANNEL,
    DRIVER_NAME,
)
from imexdra.api.opaque import ComputeDomainChannelConfig, decode_opaque_config
from imexdra.common.errors import ConfigError, DriverError
from imexdra.common.kube.api import ALL_NAMESPACES, KubeApi
from imexdra.common.kube.client import ApiStatusError, is_not_found, kube_errors, load_config
from imexdra.common.kube.connection import make_client
from imexdra.common.kube.models.apps_v1 import DaemonSet, Deployment
from imexdra.common.kube.models.core_v1 import Event, Pod
from imexdra.common.kube.models.meta_v1 import ObjectMeta
from imexdra.common.kube.models.resource_v1 import DeviceClass, ResourceClaim

T = TypeVar("T")

FIELD_MANAGER = "imexdra-cli"
#: Exit codes. Click's own are 0, 1 (an error) and 2 (a usage error), so ours start above 2:
#: diagnose exits 1 when it finds problems, :data:`EXIT_CLUSTER_ERROR` when the cluster cannot be read
#: (or holds no driver install to read) and :data:`EXIT_NOT_FOUND` when the object asked about is absent.
EXIT_PROBLEMS = 1
EXIT_CLUSTER_ERROR = 3
EXIT_NOT_FOUND = 4
#: Labels the chart puts on the kubelet plugin's DaemonSet and the controller's Deployment.
INSTALL_LABELS = {"app.kubernetes.io/part-of": "imexdra"}
INSTALL_COMPONENTS = ("kubelet-plugin", "controller")
_EPOCH = dt.datetime.min.replace(tzinfo=dt.UTC)


class ImexMode(StrEnum):
    """How the installed driver runs IMEX, as far as the cluster shows it."""

    DRIVER_MANAGED = "driver-managed"
    HOST_MANAGED = "host-managed"
    UNKNOWN = "unknown"


class ClusterAccessError(click.ClickException):
    """The kubeconfig is unusable or an API request failed."""

    exit_code = EXIT_CLUSTER_ERROR


def resolve_kubeconfig(explicit: Path | None) -> Path | None:
    """``explicit``, else ``$KUBECONFIG``, else ``~/.kube/config`` if it exists; None means in-cluster.

    ``$KUBECONFIG`` and in-cluster credentials are resolved by ``common.kube.client.load_config``; only the
    kubectl default file is added here.
    """
    if explicit is not None or os.environ.get("KUBECONFIG"):
        return explicit
    default = Path.home() / ".kube" / "config"
    if default.is_file() and not os.environ.get("KUBERNETES_SERVICE_HOST"):
        return default
    return None


def context_namespace(kubeconfig: Path | None, context: str | None) -> str:
    """The namespace of the kubeconfig context in use (kubectl's default for ``-n``); ``default`` if none."""
    try:
        return load_config(resolve_kubeconfig(kubeconfig), context=context).namespace or "default"
    except ConfigError as error:
        raise ClusterAccessError(str(error)) from error


def run_with_client(
    kubeconfig: Path | None, work: Callable[[KubeApi], Awaitable[T]], *, context: str | None = None
) -> T:
    """Run ``work`` with a fresh client on a new event loop; failures become :class:`ClusterAccessError`."""

    async def main() -> T:
        client = make_client(
            field_manager=FIELD_MANAGER, kubeconfig=resolve_kubeconfig(kubeconfig), context=context
        )
        try:
            return await work(client)
        finally:
            client.close()

    try:
        return asyncio.run(main())
    except (ConfigError, DriverError) as error:
        raise ClusterAccessError(str(error)) from error


async def find_driver_namespace(client: KubeApi, given: str | None) -> str:
    """``given``, else the namespace the driver is installed in, found by the chart's labels.

    The kubelet plugin's DaemonSet decides; without one (the plugin not installed), the controller's
    Deployment. Several installs, or none, are a :class:`ClusterAccessError` that asks for
    ``--driver-namespace``: the namespace is never guessed.
    """
    if given:
        return given
    for component, resource in zip(INSTALL_COMPONENTS, (DaemonSet, Deployment), strict=True):
        labels = {**INSTALL_LABELS, "app.kubernetes.io/component": component}
        found = {
            meta(item).namespace
            for item in await list_all(client, resource, namespace=ALL_NAMESPACES, labels=labels)
        }
        if len(found) == 1:
            return str(found.pop())
        if found:
            raise ClusterAccessError(
                f"imexdra is installed in several namespaces ({', '.join(sorted(map(str, found)))}); "
                "pick one with --driver-namespace"
            )
    selector = ",".join(f"{key}={value}" for key, value in INSTALL_LABELS.items())
    raise ClusterAccessError(
        f"found no imexdra install (no DaemonSet or Deployment labelled {selector}); "
        "give its namespace with --driver-namespace"
    )


#: As client-go does for reads: an answer of 429 (the apiserver throttling, or its watch cache
#: re-initializing: "storage is (re)initializing"), or of 5xx with a Retry-After, is retried up to ten
#: times after the wait the server names (1 s when it names none), instead of failing the command.
READ_RETRIES = 10


async def _read(action: str, call: Callable[[], Awaitable[T]]) -> T:
    for attempt in range(READ_RETRIES + 1):
        try:
            with kube_errors(action):
                return await call()
        except ApiStatusError as error:
            code, wait = error.code, error.retry_after
            if attempt == READ_RETRIES or not (code == 429 or (code is not None and code >= 500 and wait)):
                raise
            await asyncio.sleep(wait or 1.0)
    raise AssertionError("unreachable")


async def list_all(client: KubeApi, resource: Any, **selectors: Any) -> list[Any]:
    """Every object of ``resource`` matching ``selectors`` (namespace, labels, fields), as one list."""

    async def listing() -> list[Any]:
        return [item async for item in client.list(resource, **selectors)]

    return await _read(f"list {resource.__name__}", listing)


async def get_or_none(client: KubeApi, resource: Any, name: str, namespace: str) -> Any:
    """The named object, or ``None`` if it does not exist; other API errors are raised."""
    try:
        return await _read(
            f"get {resource.__name__} {namespace}/{name}",
            lambda: client.get(resource, name, namespace=namespace),
        )
    except Exception as error:
        if is_not_found(error):
            return None
        raise


async def detect_imex_mode(client: KubeApi) -> ImexMode:
    """Read the driver's IMEX mode from the installed DeviceClasses (see :func:`imex_mode_from_classes`)."""
    classes = await list_all(client, DeviceClass)
    return imex_mode_from_classes(name_of(item) for item in classes)


def imex_mode_from_classes(names: Iterable[str]) -> ImexMode:
    """Both ComputeDomain classes: driver-managed; only the channel class: host-managed; else unknown."""
    present = set(names)
    if DEVICE_CLASS_DEFAULT_CHANNEL not in present:
        return ImexMode.UNKNOWN
    return ImexMode.DRIVER_MANAGED if DEVICE_CLASS_DAEMON in present else ImexMode.HOST_MANAGED


def meta(obj: Any) -> ObjectMeta:
    """``obj.metadata``, or an empty one."""
    metadata = getattr(obj, "metadata", None)
    return metadata if isinstance(metadata, ObjectMeta) else ObjectMeta()


def name_of(obj: Any) -> str:
    """The object's name ("" if unset)."""
    return meta(obj).name or ""


def key_of(obj: Any) -> str:
    """``namespace/name`` (or just the name for cluster-scoped objects)."""
    metadata = meta(obj)
    return f"{metadata.namespace}/{metadata.name}" if metadata.namespace else metadata.name or ""


def labels_of(obj: Any) -> Mapping[str, str]:
    """The object's labels (empty if none)."""
    return meta(obj).labels or {}


def domain_uid_label(obj: Any) -> str | None:
    """The ComputeDomain UID an object is labelled with, if any."""
    return labels_of(obj).get(COMPUTE_DOMAIN_LABEL_KEY)


def pod_template_names(pod: Pod) -> set[str]:
    """Names of the ResourceClaimTemplates the pod's claims are generated from."""
    claims = pod.spec.resourceClaims if pod.spec is not None else None
    return {claim.resourceClaimTemplateName for claim in claims or [] if claim.resourceClaimTemplateName}


def pod_claim_names(pod: Pod) -> set[str]:
    """Names of the ResourceClaims the pod uses: named directly or generated for it from a template."""
    names = {c.resourceClaimName for c in (pod.spec.resourceClaims if pod.spec else None) or []}
    statuses = pod.status.resourceClaimStatuses if pod.status is not None else None
    names.update(status.resourceClaimName for status in statuses or [])
    return {name for name in names if name}


def pod_node(pod: Pod) -> str | None:
    """The node the pod is bound to, if any."""
    return (pod.spec.nodeName if pod.spec is not None else None) or None


def pod_ready(pod: Pod) -> bool:
    """The PodReady condition is True."""
    conditions = pod.status.conditions if pod.status is not None else None
    return any(c.type == "Ready" and c.status == "True" for c in conditions or [])


def pod_state(pod: Pod) -> str:
    """``Phase``, the first waiting container reason, and the node, e.g. ``Pending, ContainerCreating``."""
    status = pod.status
    phase = (status.phase if status is not None else None) or "Pending"
    containers = [*(status.initContainerStatuses or []), *(status.containerStatuses or [])] if status else []
    waiting = [
        s.state.waiting.reason
        for s in containers
        if s.state is not None and s.state.waiting is not None and s.state.waiting.reason
    ]
    node = pod_node(pod)
    parts = [phase, *waiting[:1], f"on node {node}" if node else "not scheduled"]
    return ", ".join(parts)


def driver_devices(claim: ResourceClaim) -> list[str]:
    """``pool/device`` of each device our driver allocated to the claim (empty: not ours or unallocated)."""
    allocation = claim.status.allocation if claim.status is not None else None
    results = allocation.devices.results if allocation and allocation.devices else None
    return [f"{r.pool}/{r.device}" for r in results or [] if r.driver == DRIVER_NAME]


def claim_domain_uid(claim: ResourceClaim) -> str | None:
    """The ComputeDomain UID in the claim's channel config (allocation status first, then spec)."""
    allocation = claim.status.allocation if claim.status is not None else None
    configs: list[Any] = []
    if allocation is not None and allocation.devices is not None:
        configs.extend(allocation.devices.config or [])
    if claim.spec is not None and claim.spec.devices is not None:
        configs.extend(claim.spec.devices.config or [])
    for config in configs:
        opaque = config.opaque
        if opaque is None or opaque.driver != DRIVER_NAME:
            continue
        try:
            decoded = decode_opaque_config(opaque.parameters, strict=False)
        except ConfigError:
            continue  # a broken config is the kubelet plugin's to report, not ours
        if isinstance(decoded, ComputeDomainChannelConfig):
            return decoded.domain_id
    return None


def claim_node(claim: ResourceClaim, pods: Mapping[str, Pod]) -> str | None:
    """The claim's node: from the allocation's node selector, else from a reserved-for pod (by UID)."""
    allocation = claim.status.allocation if claim.status is not None else None
    selector = allocation.nodeSelector if allocation is not None else None
    for term in selector.nodeSelectorTerms if selector is not None else []:
        for requirement in [*(term.matchFields or []), *(term.matchExpressions or [])]:
            if requirement.key in ("metadata.name", "kubernetes.io/hostname") and requirement.values:
                return requirement.values[0]
    for consumer in reserved_pods(claim):
        pod = pods.get(consumer.uid)
        if pod is not None and pod_node(pod):
            return pod_node(pod)
    return None


def reserved_pods(claim: ResourceClaim) -> list[Any]:
    """The pod consumers in the claim's ``status.reservedFor``."""
    consumers = claim.status.reservedFor if claim.status is not None else None
    return [c for c in consumers or [] if c.resource == "pods" and not c.apiGroup]


def event_time(event: Event) -> dt.datetime:
    """When the event last happened (series, lastTimestamp, eventTime, then creation)."""
    series_time = event.series.lastObservedTime if event.series is not None else None
    moments = [series_time, event.lastTimestamp, event.eventTime, meta(event).creationTimestamp]
    return max((m for m in moments if m is not None), default=_EPOCH)


def format_table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """Left-aligned columns separated by two spaces; ``None`` shows as ``-``."""
    cells = [list(headers)] + [["-" if v is None or v == "" else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells)
    return "\n".join(line.rstrip() for line in lines)
