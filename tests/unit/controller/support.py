"""Builders shared by the controller's unit tests."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import msgspec

from imexdra.api.computedomain import (
    ComputeDomain,
)
from imexdra.api.constants import CLIQUE_LABEL_KEY, COMPUTE_DOMAIN_LABEL_KEY, AllocationMode
from imexdra.api.featuregates import resolve_feature_gates
from imexdra.api.flags.common import ImexIsolation, ImexMode, ImexSettings
from imexdra.api.flags.controller import ControllerSettings
from imexdra.common.kube.api import WatchEvent
from imexdra.common.kube.models.core_v1 import Pod, PodCondition, PodSpec, PodStatus
from imexdra.common.kube.models.meta_v1 import ObjectMeta
from imexdra.common.kube.models.resource_v1 import ResourceClaimTemplate
from imexdra.common.machinery.events import ObjectRef
from imexdra.common.machinery.informer import Informer
from imexdra.controller.caches import Caches, DaemonSetMeta
from imexdra.controller.config import ControllerConfig
from imexdra.controller.daemons import DaemonPod
from imexdra_sim.builders import compute_domain_model
from tests.support.apiwrites import FakeWrites

UID = "3f2a8c1e-0000-4000-8000-000000000001"
CLIQUE = "7b0c2e4a-1111-4222-8333-444455556666.1"


def controller_settings(**overrides: object) -> ControllerSettings:
    values: dict[str, object] = {
        "pod_name": "controller-0",
        "image_name": "registry.example/imexdra:v1",
        "cd_daemon_image_pull_secret_names": (),
        "log_verbosity_cd_daemon": 4,
        "max_nodes_per_imex_domain": 18,
        "additional_namespaces": (),
    }
    values.update(overrides)
    return ControllerSettings(**values)  # type: ignore[arg-type]


def make_config(*, gates: str = "", namespace: str = "nvidia-dra", **overrides: object) -> ControllerConfig:
    return ControllerConfig.from_settings(
        namespace=namespace,
        controller=controller_settings(**overrides),
        imex=ImexSettings(imex_mode=ImexMode.DRIVER_MANAGED, imex_isolation=ImexIsolation.DOMAIN),
        feature_gates=resolve_feature_gates(gates),
    )


def make_domain(
    *,
    name: str = "cd",
    namespace: str = "team-a",
    uid: str = UID,
    mode: AllocationMode = AllocationMode.SINGLE,
) -> ComputeDomain:
    return compute_domain_model(name, namespace, uid=uid, mode=mode)


def member(node: str, ip: str = "", *, clique: str | None = CLIQUE, ready: bool = True) -> DaemonPod:
    return DaemonPod(
        name=f"daemon-{node}",
        domain_uid=UID,
        node_name=node,
        ip_address=ip or f"10.0.0.{sum(map(ord, node)) % 250 + 1}",
        clique_id=clique,
        ready=ready,
    )


def make_pod(
    *,
    node: str | None = "node-a",
    ip: str | None = "10.0.0.1",
    phase: str = "Running",
    ready: bool = True,
    clique: str | None = CLIQUE,
    uid_label: str | None = UID,
    deleting: bool = False,
    created: dt.datetime | None = None,
    name: str = "computedomain-daemon-x",
) -> Pod:
    labels = {}
    if uid_label is not None:
        labels[COMPUTE_DOMAIN_LABEL_KEY] = uid_label
    if clique is not None:
        labels[CLIQUE_LABEL_KEY] = clique
    return Pod(
        metadata=ObjectMeta(
            name=name,
            namespace="nvidia-dra",
            labels=labels,
            creationTimestamp=created,
            deletionTimestamp=dt.datetime(2026, 1, 1, tzinfo=dt.UTC) if deleting else None,
        ),
        spec=PodSpec(containers=[], nodeName=node),
        status=PodStatus(
            phase=phase,
            podIP=ip,
            conditions=[PodCondition(type="Ready", status="True" if ready else "False")],
        ),
    )


@dataclass(frozen=True)
class Recorded:
    """One event as the controller asked for it, its subject referenced as ``EventRecorder`` does."""

    regarding: ObjectRef
    type: str
    reason: str
    note: str
    action: str


@dataclass
class Events:
    """The event recorder stand-in: every event recorded, in order.

    The subject goes through ``ObjectRef.of`` as in the real recorder, so an object it could not
    reference fails here too.
    """

    recorded: list[Recorded] = field(default_factory=list)

    def record(self, regarding: Any, *, type: str, reason: str, note: str, action: str) -> None:
        ref = regarding if isinstance(regarding, ObjectRef) else ObjectRef.of(regarding)
        self.recorded.append(Recorded(ref, type, reason, note, action))

    def reasons(self) -> list[str]:
        return [event.reason for event in self.recorded]

    def typed(self) -> list[tuple[str, str]]:
        """(type, reason) per event."""
        return [(event.type, event.reason) for event in self.recorded]

    def subjects(self) -> list[tuple[str, str | None, str]]:
        """(kind, namespace, reason) per event."""
        return [(e.regarding.kind, e.regarding.namespace, e.reason) for e in self.recorded]

    def with_reason(self, reason: str) -> list[Recorded]:
        return [event for event in self.recorded if event.reason == reason]


def fake_writes(caches: Caches) -> FakeWrites:
    """An in-memory writer applying its writes to the stores of ``caches`` the reconciler reads."""
    stores: dict[type[Any], Any] = {
        ComputeDomain: caches.domains.store,
        ResourceClaimTemplate: caches.templates.store,
    }
    if caches.daemon_sets:
        stores[DaemonSetMeta] = caches.daemon_sets[0].store
    return FakeWrites(stores)


def deliver(informer: Informer[Any], type_: str, obj: Any) -> None:
    """Hand ``informer`` one watch event (ADDED, MODIFIED, DELETED) of ``obj`` (an object or its JSON).

    The informer decodes it, updates its store and calls its handlers, as for a line of a real WATCH.
    """
    body = obj if isinstance(obj, bytes) else msgspec.json.encode(obj)
    informer._handle_watch_event(WatchEvent(type=type_, object=msgspec.Raw(body)))
