"""The node simulator's kubelet: DRA prepares retried as the kubelet does, and IMEX daemon pods run.

What a real node does, and what stands in for it here:

- ``kubelet_prepare``: the kubelet's NodePrepareResources call for one pod's claim. The kubelet gives
  the plugin 45 s (``defaultClientCallTimeout``, pkg/kubelet/cm/dra/plugin); a claim the plugin leaves
  out of its answer (its own 45 s retry budget ran out), or an error, fails the pod sync, and the pod
  worker retries the sync after ``wait.Jitter(10 s, 0.5)``, i.e. 10–15 s (``backOffPeriod`` in
  pkg/kubelet/kubelet.go, ``workerBackOffPeriodJitterFactor`` in pod_workers.go). A pod waiting for
  its claim gets no earlier sync: nothing else about it changes.
- ``DaemonKubelet``: for every daemon pod (DaemonSet ``computedomain-daemon-<uid>``) bound to a simulated
  node, in order: prepare its daemon claim over that node's plugin socket (as above; skipped when the
  nodes run no plugin, ``stubs=None``, as in the controller-scale bench ``rack_bench``); report the pod
  Running, not Ready, with an IP (``imexdra_sim.apinodes.FakeKubelet.report_pod``, the integration tests'
  kubelet of API-only nodes); set the clique-ID label on the pod with the real daemon's own code
  (``imexdra.daemon.podlabel.label_own_pod``); wait, as the daemon does, until the controller lists this
  node in the domain's ComputeDomainClique (IMEX starts only once the daemon knows its own index); then
  wait ``formation_s`` (the time ``nvidia-imex`` takes to come up and answer ``READY``; 0 by default: no
  IMEX runs here, and real IMEX formation adds its own time); then report the pod Ready at the next tick
  of its startup probe (the pod spec's ``periodSeconds``, 1 s, first run at container start), which is
  when a kubelet would see the probe pass. On teardown it unprepares the daemon claims and finishes the
  terminating daemon pods (grace period 0).
- ``writes_cliques``: the daemons write their own clique entries, as upstream's daemon does (its gate
  ``ComputeDomainCliques``, on by default), for runs of upstream's controller, which only copies the
  cliques into the domain's status; ours publishes them itself (single writer), so for ours this is off.
  Upstream's daemon, once its pod is labelled: create the clique ``<CD UID>.<clique ID>`` if its
  informer does not show it, then add its own entry (lowest free index, ``NotReady``, its pod IP) and
  its pod to the owners by a full-object Update; once its pod is Ready, write ``Ready`` into its entry
  the same way. Each write is computed from the latest clique the watch showed and, on a 409, retried
  after the work queue's per-item backoff (5 ms, doubling), as upstream's informer-driven work queue
  does. IMEX starts once the daemon's own entry exists (DNS-names mode), so "listed" is that.

Times are recorded per node, as seconds since the job's submit, so a job start can be taken apart
per stage and per node.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
from benchlib import DRIVER_NAMESPACE, DraStub

from imexdra.api.computedomainclique import clique_name
from imexdra.api.constants import API_VERSION, CLIQUE_LABEL_KEY, COMPUTE_DOMAIN_LABEL_KEY
from imexdra.common.kube.api import KubeApi
from imexdra.common.kube.client import ApiStatusError
from imexdra.controller.render import DAEMON_POD_CLAIM_NAME
from imexdra.daemon.podlabel import label_own_pod
from imexdra.dra._pb import dra_v1_pb2 as dra
from imexdra_sim.apinodes import FakeKubelet

#: The kubelet's NodePrepareResources timeout (pkg/kubelet/cm/dra/plugin: defaultClientCallTimeout).
KUBELET_DRA_TIMEOUT_S = 45.0
#: The pod worker's retry after a failed sync: ``wait.Jitter(backOffPeriod, 0.5)``.
KUBELET_BACKOFF_S = 10.0
KUBELET_BACKOFF_JITTER = 0.5


def kubelet_backoff() -> float:
    """One pod-worker backoff after a failed sync, as ``wait.Jitter(10 s, 0.5)`` draws it."""
    return KUBELET_BACKOFF_S * (1 + KUBELET_BACKOFF_JITTER * random.random())  # noqa: S311


@dataclass
class PrepareOutcome:
    """A claim the kubelet got prepared: how many calls it took and how long the last one took."""

    calls: int
    last_call_ms: float
    retry_reasons: list[str] = field(default_factory=list)


async def kubelet_prepare(stub: DraStub, namespace: str, name: str, uid: str) -> PrepareOutcome:
    """NodePrepareResources for one claim until the plugin returns it without error, as the kubelet."""
    request = dra.NodePrepareResourcesRequest(claims=[dra.Claim(namespace=namespace, name=name, uid=uid)])
    calls = 0
    reasons: list[str] = []
    while True:
        calls += 1
        started = time.perf_counter()
        try:
            response = await stub.NodePrepareResources(request, timeout=KUBELET_DRA_TIMEOUT_S)
        except grpc.aio.AioRpcError as error:
            reasons.append(f"rpc {error.code().name}")
        else:
            if uid not in response.claims:
                reasons.append("left out (plugin's retry budget ended)")
            elif response.claims[uid].error:
                reasons.append(response.claims[uid].error[:120])
            else:
                return PrepareOutcome(calls, (time.perf_counter() - started) * 1e3, reasons)
        await asyncio.sleep(kubelet_backoff())


async def kubelet_unprepare(stub: DraStub, namespace: str, name: str, uid: str) -> None:
    request = dra.NodeUnprepareResourcesRequest(claims=[dra.Claim(namespace=namespace, name=name, uid=uid)])
    await stub.NodeUnprepareResources(request, timeout=KUBELET_DRA_TIMEOUT_S)


def claim_reserved_for(pod: dict[str, Any], claim_key: str, claims: dict[str, dict[str, Any]]) -> Any:
    """The pod's claim ``claim_key`` once it is reserved for the pod (what the kubelet waits for)."""
    statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or []
    name = next((s.get("resourceClaimName") for s in statuses if s["name"] == claim_key), None)
    claim = claims.get(name or "")
    reserved = ((claim or {}).get("status") or {}).get("reservedFor") or []
    if claim is not None and any(r.get("uid") == pod["metadata"]["uid"] for r in reserved):
        return claim
    return None


#: Per-node stages of a daemon, in order (keys of ``DaemonKubelet.times``).
DAEMON_STAGES = (
    "created",  # the DaemonSet controller created the pod
    "claimed",  # kube-controller-manager created its daemon claim (the kcm floor's pace)
    "bound",  # the scheduler bound it (its daemon claim allocated)
    "prepared",  # its daemon claim prepared by the node's plugin
    "running",  # reported Running (not Ready) with an IP
    "labelled",  # clique-ID label set (the real daemon's code)
    "listed",  # the controller listed the node in its clique (the daemon learns its index)
    "ready",  # reported Ready (startup probe passed after IMEX formation)
    "published_ready",  # the controller published the node Ready in its clique
)


@dataclass
class DaemonKubelet:
    """Plays kubelet, container runtime and daemon for the daemon pods on simulated nodes."""

    kube: KubeApi
    #: Each node's plugin; None: no plugins run, daemon claims need no node-side preparation.
    stubs: Callable[[str], DraStub] | None
    clique_of: Callable[[str], str]
    clock: Callable[[], float]
    changed: asyncio.Event
    formation_s: float = 0.0
    #: The daemons write their own clique entries (upstream's daemon protocol; see the module docstring).
    writes_cliques: bool = False
    #: 409s the daemons' own clique writes met (``writes_cliques``).
    clique_conflicts: int = 0
    times: dict[str, dict[str, float]] = field(default_factory=lambda: {s: {} for s in DAEMON_STAGES})
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    claims: dict[str, dict[str, Any]] = field(default_factory=dict)
    prepared_claims: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # node -> claim
    prepare_calls: int = 0
    retry_reasons: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _listed: dict[str, asyncio.Event] = field(default_factory=dict)
    _cliques: dict[str, dict[str, Any]] = field(default_factory=dict)
    _handed: set[str] = field(default_factory=set)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.reporter = FakeKubelet(self.kube, [], DRIVER_NAMESPACE)

    # -- watch events (pods, claims and cliques of the driver namespace) --

    def on_pod(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED" or COMPUTE_DOMAIN_LABEL_KEY not in (obj["metadata"].get("labels") or {}):
            return
        self.pods[obj["metadata"]["name"]] = obj
        node = self._node_of(obj)
        if node is not None:
            self.times["created"].setdefault(node, self.clock())
        if obj["spec"].get("nodeName"):
            self.times["bound"].setdefault(obj["spec"]["nodeName"], self.clock())
        self.changed.set()

    def on_claim(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            return
        self.claims[obj["metadata"]["name"]] = obj
        owners = obj["metadata"].get("ownerReferences") or []
        owner = next((ref["name"] for ref in owners if ref["kind"] == "Pod"), "")
        node = self._node_of(self.pods[owner]) if owner in self.pods else None
        if node is not None:
            self.times["claimed"].setdefault(node, self.clock())
        self.changed.set()

    def on_clique(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            self._cliques.pop(obj["metadata"]["name"], None)
            return
        self._cliques[obj["metadata"]["name"]] = obj
        for daemon in obj.get("daemons") or []:
            node = daemon.get("nodeName", "")
            self._listed.setdefault(node, asyncio.Event()).set()
            if daemon.get("status") == "Ready":
                self.times["published_ready"].setdefault(node, self.clock())
        self.changed.set()

    @staticmethod
    def _node_of(pod: dict[str, Any]) -> str | None:
        """The node a DaemonSet pod is for (its nodeAffinity names it before it is bound)."""
        if pod["spec"].get("nodeName"):
            return str(pod["spec"]["nodeName"])
        affinity = ((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        ) or {}
        for term in affinity.get("nodeSelectorTerms") or []:
            for match in term.get("matchFields") or []:
                if match.get("key") == "metadata.name" and match.get("values"):
                    return str(match["values"][0])
        return None

    # -- the kubelet's part --

    def poll(self) -> None:
        """Start every bound daemon pod whose daemon claim is reserved for it."""
        for name, pod in self.pods.items():
            node = pod["spec"].get("nodeName")
            if not node or name in self._handed or pod["metadata"].get("deletionTimestamp"):
                continue
            claim = claim_reserved_for(pod, DAEMON_POD_CLAIM_NAME, self.claims)
            if claim is None:
                continue
            self._handed.add(name)
            task = asyncio.create_task(self._run(pod, node, claim))
            self._tasks.add(task)
            task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.errors.append(repr(task.exception()))
            self.changed.set()

    async def _run(self, pod: dict[str, Any], node: str, claim: dict[str, Any]) -> None:
        name, meta = pod["metadata"]["name"], claim["metadata"]
        if self.stubs is not None:
            outcome = await kubelet_prepare(self.stubs(node), DRIVER_NAMESPACE, meta["name"], meta["uid"])
            self.prepare_calls += outcome.calls
            self.retry_reasons += outcome.retry_reasons
            self.prepared_claims[node] = (DRIVER_NAMESPACE, meta["name"], meta["uid"])
            self._mark("prepared", node)
        ip = await self.reporter.report_pod(name, node, ready=False)
        container_started = time.monotonic()
        self._mark("running", node)
        await label_own_pod(self.kube, name=name, namespace=DRIVER_NAMESPACE, clique_id=self.clique_of(node))
        self._mark("labelled", node)
        if self.writes_cliques:
            await self._write_own_entry(pod, node, ip, "NotReady")
        await self._listed.setdefault(node, asyncio.Event()).wait()
        self._mark("listed", node)
        await asyncio.sleep(self.formation_s)
        period = float(self._startup_probe(pod).get("periodSeconds") or 10)
        elapsed = time.monotonic() - container_started
        await asyncio.sleep(math.ceil(elapsed / period) * period - elapsed)
        await self.reporter.report_pod(name, node, ready=True)
        self._mark("ready", node)
        if self.writes_cliques:
            await self._write_own_entry(pod, node, ip, "Ready")

    async def _write(self, method: str, path: str, body: dict[str, Any]) -> dict[str, Any] | None:
        """``body`` written; None on a 409 (AlreadyExists or a stale resourceVersion)."""
        try:
            response = await self.kube.request(method, path, body=body)
        except ApiStatusError as error:
            if error.code == 409:
                return None
            raise
        written: dict[str, Any] = json.loads(response.body)
        return written

    async def _write_own_entry(self, pod: dict[str, Any], node: str, ip: str, status: str) -> None:
        """Upstream's daemon: its own entry in its clique, created if need be (module docstring)."""
        meta = pod["metadata"]
        clique_id = self.clique_of(node)
        name = clique_name(meta["labels"][COMPUTE_DOMAIN_LABEL_KEY], clique_id)
        collection = f"/apis/resource.nvidia.com/v1beta1/namespaces/{DRIVER_NAMESPACE}/computedomaincliques"
        owner = {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}
        backoff = 0.005
        while True:
            clique = self._cliques.get(name)
            if clique is None:
                body = {
                    "apiVersion": API_VERSION,
                    "kind": "ComputeDomainClique",
                    "metadata": {
                        "name": name,
                        "namespace": DRIVER_NAMESPACE,
                        "labels": {
                            COMPUTE_DOMAIN_LABEL_KEY: meta["labels"][COMPUTE_DOMAIN_LABEL_KEY],
                            CLIQUE_LABEL_KEY: clique_id,
                        },
                        "ownerReferences": [owner],
                    },
                    "daemons": [],
                }
                created = await self._write("POST", collection, body)
                if created is not None:  # None: AlreadyExists, the watch will show it
                    self._cliques.setdefault(name, created)
                    continue
            else:
                daemons = [dict(d) for d in clique.get("daemons") or []]
                mine = next((d for d in daemons if d["nodeName"] == node), None)
                owners = list(clique["metadata"].get("ownerReferences") or [])
                if (
                    mine is not None
                    and (mine["ipAddress"], mine["status"]) == (ip, status)
                    and any(o["uid"] == meta["uid"] for o in owners)
                ):
                    return
                if mine is None:
                    used = {d["index"] for d in daemons}
                    index = next(i for i in range(len(daemons) + 1) if i not in used)
                    mine = {"nodeName": node, "cliqueID": clique_id, "index": index, "status": "NotReady"}
                    daemons.append(mine)
                mine.update(ipAddress=ip, status=status)
                if not any(o["uid"] == meta["uid"] for o in owners):
                    owners.append(owner)
                update = {
                    **clique,
                    "daemons": daemons,
                    "metadata": {**clique["metadata"], "ownerReferences": owners},
                }
                written = await self._write("PUT", f"{collection}/{name}", update)
                if written is not None:
                    latest = self._cliques.get(name, clique)
                    if int(written["metadata"]["resourceVersion"]) > int(
                        latest["metadata"]["resourceVersion"]
                    ):
                        # upstream's mutation cache: its own write is seen before the watch shows it
                        self.on_clique("MODIFIED", written)
                    return
            self.clique_conflicts += 1  # the Update's 409, or the create's AlreadyExists
            await asyncio.sleep(backoff)
            backoff *= 2

    @staticmethod
    def _startup_probe(pod: dict[str, Any]) -> dict[str, Any]:
        containers = pod["spec"].get("containers") or [{}]
        probe: dict[str, Any] = containers[0].get("startupProbe") or {}
        return probe

    def _mark(self, stage: str, node: str) -> None:
        self.times[stage].setdefault(node, self.clock())
        self.changed.set()

    # -- teardown --

    async def unprepare_all(self) -> None:
        """Unprepare the daemon claims (before the next job reuses the nodes), as the kubelet would."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        stubs = self.stubs
        if stubs is not None:
            await asyncio.gather(
                *(kubelet_unprepare(stubs(node), *claim) for node, claim in self.prepared_claims.items())
            )
        self.prepared_claims.clear()
