"""Builders shared by the controller's unit tests."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from lightkube.models.core_v1 import PodCondition, PodSpec, PodStatus
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod

from imexdra.api.computedomain import (
    ComputeDomain,
)
from imexdra.api.constants import CLIQUE_LABEL_KEY, COMPUTE_DOMAIN_LABEL_KEY, AllocationMode
from imexdra.api.featuregates import resolve_feature_gates
from imexdra.api.flags.common import ImexIsolation, ImexMode, ImexSettings
from imexdra.api.flags.controller import ControllerSettings
from imexdra.controller.config import ControllerConfig
from imexdra.controller.daemons import DaemonPod
from imexdra_sim.builders import compute_domain_model

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


@dataclass
class Events:
    """The event recorder stand-in: (namespace of the object, reason, note) per event."""

    recorded: list[tuple[str, str, str]] = field(default_factory=list)

    def record(self, regarding: Any, *, type: str, reason: str, note: str, action: str) -> None:
        self.recorded.append((regarding.metadata.namespace or "", reason, note))
