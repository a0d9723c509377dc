"""The contract between the controller and the compute-domain daemons, and how pods are read under it.

Single writer: every shared object has exactly one writer. The controller alone writes
ComputeDomainClique objects and ComputeDomain status; a daemon writes nothing but a label and an
annotation on its own pod. That removes upstream's N-daemons-compare-and-swap-one-object pattern and
its 409/429 storms (docs/architecture.md §5; upstream issues #816, #1107, #1418).

What a daemon pod provides
--------------------------
- Label ``resource.nvidia.com/computeDomain=<ComputeDomain UID>``: set by the DaemonSet template.
- Label ``resource.nvidia.com/computeDomain.cliqueID=<cliqueID>``: set by the daemon **on its own pod**
  (a merge patch of ``metadata.labels``) as soon as it starts and knows ``CLIQUE_ID``, exactly as
  upstream's daemon does first thing. ``<cliqueID>`` is ``<clusterUUID>.<cliqueId>``, written verbatim:
  a UUID, a dot and a decimal number are a valid label value (≤ 47 characters), so no encoding is used.
  An **empty value** (label present, value ``""``) announces a node without an NVLink fabric. A pod
  without the label has not announced itself yet and is not a member of anything.
- Node = ``spec.nodeName``; IP = ``status.podIP``; readiness = the pod's ``Ready`` condition (with phase
  ``Running``), which the kubelet drives from the ``compute-domain-daemon check`` readiness probe.
- Annotation ``resource.nvidia.com/imexPeers``: the daemon's last report of its IMEX peer connections
  (``api.imexpeers``), merge-patched by the daemon on its own pod on change only; the controller copies
  it into the node's entries as ``imexPeers`` (docs/imex-health.md). A pod without it has not reported.
- A daemon leaving gracefully needs to do nothing: once its pod is terminating it is dropped from its
  clique at once (upstream's daemon removed its own entry by IP on SIGTERM).

What the controller publishes, and daemons read
-----------------------------------------------
- With gate ``ComputeDomainCliques`` on (default): one ComputeDomainClique per (domain, clique) in the
  driver namespace, named ``<ComputeDomain UID>.<cliqueID>`` (``api.computedomainclique.clique_name``),
  labelled with both keys above, listing ``daemons[]`` entries ``{nodeName, ipAddress, cliqueID,
  index, status}`` sorted by index — upstream's shape. A daemon watches its clique object (field
  selector ``metadata.name=<name>``) to learn its peers and its own ``index`` (its entry is the one with
  ``nodeName == NODE_NAME``; the DNS name is ``compute-domain-daemon-<domain hash>-%04d`` of it).
  The object may not exist yet when the daemon starts: it appears once the pod has an IP and the
  cliqueID label.
- With the gate off: the same entries, with the same indices, appear in the ComputeDomain's
  ``status.nodes`` (``name`` instead of ``nodeName``); no clique objects are written.
- Indices are assigned by the controller alone: the lowest free index below
  ``MAX_NODES_PER_IMEX_DOMAIN``; a node keeps its index as long as it has a live daemon pod of the domain
  in that clique (a restarted pod on the same node keeps it too); a controller restart recovers the
  indices from the published objects. A daemon that does not fit gets no entry (a Warning Event
  ``CliqueFull`` on the ComputeDomain says so) and should keep waiting.
- ``status`` of an entry mirrors the pod's readiness; non-fabric nodes appear only in the domain's
  ``status.nodes`` with ``cliqueID: ""`` and ``index: -1``.
- A daemon that cannot run writes its fatal error to its termination message (``/dev/termination-log``);
  while its container keeps failing, the controller repeats it on the ComputeDomain as a Warning Event
  ``DaemonFailing`` naming the node, so ``kubectl describe computedomain`` says why it is not Ready.
  A container the node cannot even create (the runtime refusing its CDI devices, its image missing)
  is reported the same way, with the kubelet's waiting reason and message.
- Writes are batched per domain (``config.DEFAULT_DEBOUNCE_SECONDS``): a burst of daemons starting
  produces a handful of clique and status writes, never one write per daemon.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass

from imexdra.api.constants import CLIQUE_LABEL_KEY, COMPUTE_DOMAIN_LABEL_KEY
from imexdra.api.imexpeers import IMEX_PEERS_ANNOTATION, ImexPeers, decode_annotation
from imexdra.common.kube.models.core_v1 import Pod

_FINISHED_PHASES = frozenset({"Succeeded", "Failed"})
_EPOCH = dt.datetime.min.replace(tzinfo=dt.UTC)


@dataclass(frozen=True, slots=True)
class DaemonPod:
    """A live daemon pod of a domain, reduced to what membership needs."""

    name: str
    domain_uid: str
    node_name: str
    ip_address: str
    #: ``None``: not announced yet; ``""``: a node without an NVLink fabric.
    clique_id: str | None
    ready: bool
    created: dt.datetime = _EPOCH
    failure: str = ""
    """Why the daemon container is failing (not ready): the reason and message of a container the node
    cannot create, else its last non-zero exit's termination message (the daemon writes its fatal
    error there) or exit code; ``""`` otherwise."""
    imex_peers: ImexPeers | None = None
    """The daemon's last report of its IMEX peer connections (its pod's annotation), if any."""

    @property
    def fabric(self) -> bool:
        """True for a daemon that announced a (non-empty) NVLink clique."""
        return bool(self.clique_id)


def _is_ready(pod: Pod) -> bool:
    status = pod.status
    if status is None or status.phase != "Running":
        return False
    return any(c.type == "Ready" and c.status == "True" for c in status.conditions or ())


def daemon_pod(pod: Pod) -> DaemonPod | None:
    """Read a daemon pod; ``None`` unless it is a live, scheduled pod with an IP and the domain label."""
    meta, spec, status = pod.metadata, pod.spec, pod.status
    if meta is None or spec is None or status is None or meta.deletionTimestamp is not None:
        return None
    uid = (meta.labels or {}).get(COMPUTE_DOMAIN_LABEL_KEY)
    if not uid or not spec.nodeName or not status.podIP or status.phase in _FINISHED_PHASES:
        return None
    return DaemonPod(
        name=meta.name or "",
        domain_uid=uid,
        node_name=spec.nodeName,
        ip_address=status.podIP,
        clique_id=(meta.labels or {}).get(CLIQUE_LABEL_KEY),
        ready=_is_ready(pod),
        created=meta.creationTimestamp or _EPOCH,
        failure=_failure(pod),
        imex_peers=decode_annotation((meta.annotations or {}).get(IMEX_PEERS_ANNOTATION)),
    )


_CANNOT_START = frozenset(
    {
        "CreateContainerError",
        "CreateContainerConfigError",
        "RunContainerError",
        "ErrImagePull",
        "ImagePullBackOff",
        "ErrImageNeverPull",
        "InvalidImageName",
    }
)
"""Waiting reasons meaning the node cannot create or start the container at all (no exit to report):
e.g. the runtime refusing the base CDI spec. CrashLoopBackOff is not here: its last exit says more."""


def _failure(pod: Pod) -> str:
    for container in (pod.status.containerStatuses if pod.status else None) or ():
        if container.ready:
            continue
        waiting = container.state.waiting if container.state else None
        if waiting is not None and waiting.reason in _CANNOT_START:
            message = (waiting.message or "").strip()
            return f"{waiting.reason}: {message}" if message else waiting.reason
        last = container.lastState.terminated if container.lastState else None
        if last is None or not last.exitCode:
            continue
        message = (last.message or "").strip()
        return message or f"exited with code {last.exitCode}" + (f" ({last.reason})" if last.reason else "")
    return ""


def one_per_node(pods: Iterable[DaemonPod]) -> list[DaemonPod]:
    """The one daemon pod speaking for each node, sorted by node name.

    A DaemonSet runs one pod per node; during a handover the ready, then the newest pod wins.
    """
    chosen: dict[str, DaemonPod] = {}
    for pod in pods:
        current = chosen.get(pod.node_name)
        if current is None or (pod.ready, pod.created, pod.name) > (
            current.ready,
            current.created,
            current.name,
        ):
            chosen[pod.node_name] = pod
    return [chosen[node] for node in sorted(chosen)]
