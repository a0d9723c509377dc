"""What one job start is measured by: the watches' record, the node simulator, the readings.

``JobStart`` holds what the watches saw as seconds since the submit; ``Simulator`` plays the kubelet of
the simulated nodes; the rest turn metrics, ``/proc`` and py-spy readings into the reported figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchlib import (
    cpu_seconds,
)
from daemonsim import DAEMON_STAGES, DaemonKubelet, claim_reserved_for, kubelet_prepare, kubelet_unprepare
from jobstart_api import CLAIM, Api
from jobstart_fleet import Fleet, rack_clique
from stats import percentile

from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.promtext import Samples

# -- one job start --------------------------------------------------------------------------------


#: What our controller and plugins write (the plugins label nodes in driver-managed mode).
DRIVER_RESOURCES = (
    "computedomains",
    "computedomaincliques",
    "resourceclaimtemplates",
    "resourceslices",
    "nodes",
)


@dataclass
class JobStart:
    """What the watches saw of one job start, as seconds since the submit."""

    pods: int
    t0: float = 0.0
    domain_ready: float | None = None
    #: The domain's latest turn to Ready (driver-managed: Ready, NotReady as daemons join, Ready again).
    domain_ready_last: float | None = None
    domain_is_ready: bool = False
    pod_created: dict[str, float] = field(default_factory=dict)
    pod_bound: dict[str, float] = field(default_factory=dict)
    pod_running: dict[str, float] = field(default_factory=dict)
    claim_created: dict[str, float] = field(default_factory=dict)
    claim_allocated: dict[str, float] = field(default_factory=dict)
    prepared: dict[str, float] = field(default_factory=dict)
    prepare_ms: list[float] = field(default_factory=list)
    prepare_errors: int = 0
    pods_seen: dict[str, dict[str, Any]] = field(default_factory=dict)
    claims_seen: dict[str, dict[str, Any]] = field(default_factory=dict)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def on_domain(self, _kind: str, obj: dict[str, Any]) -> None:
        ready = (obj.get("status") or {}).get("status") == "Ready"
        if ready and not self.domain_is_ready:
            self.domain_ready_last = self.now()
            if self.domain_ready is None:
                self.domain_ready = self.domain_ready_last
        self.domain_is_ready = ready
        self.changed.set()

    def on_pod(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            return
        name = obj["metadata"]["name"]
        self.pods_seen[name] = obj
        self.pod_created.setdefault(name, self.now())
        if obj["spec"].get("nodeName"):
            self.pod_bound.setdefault(name, self.now())
        if (obj.get("status") or {}).get("phase") == "Running":
            self.pod_running.setdefault(name, self.now())
        self.changed.set()

    def on_claim(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "DELETED":
            return
        name = obj["metadata"]["name"]
        self.claims_seen[name] = obj
        self.claim_created.setdefault(name, self.now())
        if (obj.get("status") or {}).get("allocation"):
            self.claim_allocated.setdefault(name, self.now())
        self.changed.set()

    def ready_to_prepare(self) -> list[tuple[str, str, dict[str, Any]]]:
        """(pod, node, claim) for bound pods whose claim is reserved for them, not yet handed over."""
        ready = []
        for name, pod in self.pods_seen.items():
            node = pod["spec"].get("nodeName")
            if not node or name in self.prepared:
                continue
            claim = claim_reserved_for(pod, CLAIM, self.claims_seen)
            if claim is not None:
                ready.append((name, node, claim))
        return ready

    def breakdown(self) -> dict[str, Any]:
        def last(times: dict[str, float]) -> float | None:
            return round(max(times.values()), 2) if len(times) >= self.pods else None

        return {
            "domain_ready_s": None if self.domain_ready is None else round(self.domain_ready, 2),
            "domain_ready_last_s": None
            if self.domain_ready_last is None
            else round(self.domain_ready_last, 2),
            "all_pods_created_s": last(self.pod_created),
            "all_claims_created_s": last(self.claim_created),
            "all_claims_allocated_s": last(self.claim_allocated),
            "all_pods_bound_s": last(self.pod_bound),
            "all_prepared_s": last(self.prepared),
        }


class Simulator:
    """The kubelet's part for pods bound to simulated nodes: prepare over the socket, report Running.

    Driver-managed, ``daemons`` also plays kubelet, runtime and daemon of the IMEX daemon pods.
    """

    def __init__(
        self,
        api: Api,
        fleet: Fleet,
        namespace: str,
        state: JobStart,
        *,
        formation_s: float = 0.0,
        daemons_write_cliques: bool = False,
    ) -> None:
        self.api = api
        self.nodes = fleet.by_name()
        self.namespace = namespace
        self.state = state
        self.handed: set[str] = set()
        self.claims: dict[str, tuple[str, str, str]] = {}  # pod -> (node, claim name, claim uid)
        self.tasks: set[asyncio.Task[None]] = set()
        self.prepare_calls: list[int] = []
        self.retry_reasons: Counter[str] = Counter()
        self.daemons: DaemonKubelet | None = None
        if not fleet.host_managed:
            cliques = {node.name: rack_clique(i) for i, node in enumerate(fleet.nodes)}
            self.daemons = DaemonKubelet(
                api.client,
                stubs=lambda node: self.nodes[node].connect(),
                clique_of=cliques.__getitem__,
                clock=state.now,
                changed=state.changed,
                formation_s=formation_s,
                writes_cliques=daemons_write_cliques,
            )

    def poll(self) -> None:
        if self.daemons is not None:
            self.daemons.poll()
            if self.daemons.errors:
                raise RuntimeError(f"daemon stand-in failed: {self.daemons.errors[0]}")
        for pod, node, claim in self.state.ready_to_prepare():
            if pod in self.handed:
                continue
            self.handed.add(pod)
            task = asyncio.create_task(
                self._prepare(pod, node, claim["metadata"]["name"], claim["metadata"]["uid"])
            )
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def _prepare(self, pod: str, node: str, claim: str, uid: str) -> None:
        outcome = await kubelet_prepare(self.nodes[node].connect(), self.namespace, claim, uid)
        self.prepare_calls.append(outcome.calls)
        self.retry_reasons.update(reason.split(":")[0] for reason in outcome.retry_reasons)
        self.state.prepare_errors += outcome.calls - 1
        self.state.prepare_ms.append(outcome.last_call_ms)
        self.state.prepared[pod] = self.state.now()
        self.claims[pod] = (node, claim, uid)
        self.state.changed.set()
        status = {"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}
        with contextlib.suppress(Exception):
            await self.api.patch(f"/api/v1/namespaces/{self.namespace}/pods/{pod}/status", status)

    async def unprepare_all(self) -> None:
        await asyncio.gather(
            *(
                kubelet_unprepare(self.nodes[node].connect(), self.namespace, claim, uid)
                for node, claim, uid in self.claims.values()
            )
        )


def checkpoint_poller(fleet: Fleet, state: JobStart) -> Callable[[], None]:
    """With real kubelets: a pod counts as prepared once its node's checkpoint says so."""

    def poll() -> None:
        pods_by_claim_uid = {}
        for pod_name, pod in state.pods_seen.items():
            statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or []
            for status in statuses:
                claim = state.claims_seen.get(status.get("resourceClaimName") or "")
                if claim is not None:
                    pods_by_claim_uid[claim["metadata"]["uid"]] = (pod_name, pod["spec"].get("nodeName"))
        nodes = fleet.by_name()
        for uid, (pod_name, node) in pods_by_claim_uid.items():
            if pod_name in state.prepared or node not in nodes:
                continue
            if uid in nodes[node].prepared_claims():
                state.prepared[pod_name] = state.now()

    return poll


def api_deltas(before: Samples, after: Samples) -> dict[str, Any]:
    """What the apiserver served between two scrapes: requests, watch traffic.

    Requests by code, 409s and 429s by verb and resource; watch traffic by resource in MiB, every
    watcher's copy counted (the cost of a write grows with the object and with its watchers).
    """
    by_code: Counter[str] = Counter()
    by_verb_resource: Counter[str] = Counter()
    refused: dict[str, Counter[str]] = {"409": Counter(), "429": Counter()}
    watch_bytes: dict[str, float] = {}
    for key, value in after.items():
        if key[0] == "apiserver_watch_events_sizes_sum":  # bytes sent to watchers, every watcher counted
            resource = dict(key[1]).get("resource", "")
            watch_bytes[resource] = watch_bytes.get(resource, 0.0) + value - before.get(key, 0.0)
        if key[0] != "apiserver_request_total":
            continue  # other samples may be NaN (a summary's empty quantile)
        delta = round(value - before.get(key, 0.0))  # a request counter: whole numbers
        if delta <= 0:
            continue
        labels = dict(key[1])
        code = labels.get("code", "")
        resource = labels.get("resource", "") or labels.get("group", "")
        if labels.get("subresource"):
            resource += f"/{labels['subresource']}"
        by_code[code] += delta
        if code in refused:
            refused[code][f"{labels.get('verb')} {resource}"] += delta
        if labels.get("verb") not in ("WATCH", "CONNECT"):
            by_verb_resource[f"{labels.get('verb')} {resource}"] += delta
    driver_409 = sum(
        n for key, n in refused["409"].items() if key.split()[-1].split("/")[0] in DRIVER_RESOURCES
    )
    return {
        "409": int(by_code.get("409", 0)),
        "429": int(by_code.get("429", 0)),
        "409_on_driver_resources": int(driver_409),
        "409_by_resource": {r: int(n) for r, n in refused["409"].items()},
        "429_by_resource": {r: int(n) for r, n in refused["429"].items()},
        "by_code": {code: int(n) for code, n in sorted(by_code.items())},
        "by_verb_and_resource": {
            k: int(v) for k, v in sorted(by_verb_resource.items(), key=lambda kv: -kv[1])
        },
        "requests": int(sum(by_verb_resource.values())),
        "watch_mib_by_resource": {
            r: round(b / 2**20, 1)
            for r, b in sorted(watch_bytes.items(), key=lambda rb: -rb[1])
            if b >= 2**20 / 10
        },
    }


def stuck(state: JobStart, simulator: Simulator | None, fleet: Fleet) -> str:
    """What a timed-out job start reached, for the error message."""
    found: dict[str, Any] = {"breakdown": state.breakdown()}
    found["prepared"] = len(state.prepared)
    found["lease_renew_max_gap_s"] = round(fleet.renew_max_gap_s, 1)
    if simulator is not None and simulator.daemons is not None:
        daemons = simulator.daemons
        found["daemon_stages"] = {stage: len(t) for stage, t in daemons.times.items()}
        found["daemon_pods_seen"] = len(daemons.pods)
        late = sorted(set(daemons.times["ready"]) - set(daemons.times["published_ready"]))
        found["ready_not_published"] = {
            node: [
                (c.get("type"), c.get("status"), c.get("reason"))
                for pod in daemons.pods.values()
                if pod["spec"].get("nodeName") == node
                for c in (pod.get("status") or {}).get("conditions") or []
                if c.get("type") == "Ready"
            ]
            for node in late[:10]
        }
    log = fleet.nodes[0].base / "plugin.log"
    tail = log.read_text(errors="replace").splitlines()[-5:] if log.exists() else []
    return json.dumps(found) + "\nnode-0's plugin log ends:\n" + "\n".join(line[:300] for line in tail)


def controller_writes(before: Samples, after: Samples) -> dict[str, Any]:
    """The controller's own count of its API writes during the job start, by resource and verb."""
    by: Counter[str] = Counter()
    conflicts = 0
    for (name, labels), value in after.items():
        delta = value - before.get((name, labels), 0.0)
        if name != "imexdra_controller_api_writes_total" or delta <= 0:
            continue
        fields = dict(labels)
        by[f"{fields.get('verb')} {fields.get('resource')}"] += int(delta)
        conflicts += int(delta) if fields.get("code") == "409" else 0
    return {"total": sum(by.values()), "409": conflicts, "by_verb_and_resource": dict(by.most_common())}


def stage_spans(times: dict[str, dict[str, float]], expected: int) -> dict[str, Any]:
    """Per daemon stage: when the first node reached it, when all ``expected`` had, and how many did."""
    spans: dict[str, Any] = {}
    for stage, reached in times.items():
        values = list(reached.values())
        spans[stage] = {
            "first_s": round(min(values), 2) if values else None,
            "all_s": round(max(values), 2) if len(values) >= expected else None,
            "count": len(values),
        }
    return spans


def step_lags(per_node: dict[str, dict[str, float | None]], chain: Sequence[str]) -> dict[str, Any]:
    """p50 and max over nodes of the time from each stage of ``chain`` to the next (where both are known)."""
    steps: dict[str, Any] = {}
    for start, end in itertools.pairwise(chain):
        lags = [
            end_s - start_s
            for marks in per_node.values()
            if (start_s := marks.get(start)) is not None and (end_s := marks.get(end)) is not None
        ]
        if lags:
            steps[f"{start}->{end}"] = {
                "p50_s": round(percentile(lags, 0.5), 2),
                "max_s": round(max(lags), 2),
            }
    return steps


def daemon_breakdown(state: JobStart, daemons: DaemonKubelet) -> dict[str, Any]:
    """When the daemons reached each stage (first and last), and each per-node step's p50 and max."""
    times = daemons.times
    worker_node = {
        pod["spec"]["nodeName"]: name for name, pod in state.pods_seen.items() if pod["spec"].get("nodeName")
    }
    per_node = {
        node: {
            "worker_bound": state.pod_bound.get(pod),
            **{stage: times[stage].get(node) for stage in DAEMON_STAGES},
            "worker_prepared": state.prepared.get(pod),
        }
        for node, pod in worker_node.items()
    }
    bound_before_ready = [
        node
        for node, steps in per_node.items()
        if steps["worker_bound"] is not None
        and steps["ready"] is not None
        and steps["worker_bound"] < steps["ready"]
    ]
    bound_to_prepared = [
        steps["worker_prepared"] - steps["worker_bound"]
        for steps in per_node.values()
        if steps["worker_bound"] is not None and steps["worker_prepared"] is not None
    ]
    return {
        # Issue 42's figures of merit: a worker bound before its node's daemon was Ready waits, bound,
        # for the daemon (ContainerCreating on a real node); under binding conditions none should.
        "workers_bound_before_daemon_ready": len(bound_before_ready),
        "worker_bound_to_prepared_s": {
            "p50": round(percentile(bound_to_prepared, 0.5), 3),
            "max": round(max(bound_to_prepared), 3),
        }
        if bound_to_prepared
        else None,
        "stages": stage_spans(times, state.pods),
        "steps_per_node": step_lags(per_node, ("worker_bound", *DAEMON_STAGES, "worker_prepared")),
        "daemon_claim_prepare_calls": daemons.prepare_calls,
        "daemon_retry_reasons": daemons.retry_reasons[:5],
        "daemons_write_cliques": daemons.writes_cliques,
        "daemon_clique_write_conflicts": daemons.clique_conflicts,
    }


def component_cpu(cluster: LocalCluster) -> dict[str, float]:
    """CPU seconds so far of each control-plane process, and of all kubelets and all fakecris together."""
    readings: dict[str, float] = {}
    # LocalCluster has no public list of its processes; the bench only reads it.
    for process in cluster._supervisor.processes:
        if process.alive():
            kind = process.name.rsplit("-", 1)[-1] + "s" if process.name.startswith("node-") else process.name
            readings[kind] = readings.get(kind, 0.0) + cpu_seconds(process.popen.pid)
    return readings
