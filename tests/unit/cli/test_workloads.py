"""How ``imexdra diagnose`` turns a pod, workload or namespace into the consumers of claims it checks.

Aspects covered: each workload kind is found by its pods' labels (Job ``batch.kubernetes.io/job-name``,
MPIJob ``training.kubeflow.org/job-name``, Deployment ``spec.selector.matchLabels``); without pods its
pod templates (one per MPIJob replica type) are checked; a namespace keeps only pods with claims; an
absent target is None.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from imexdra.cli.targets import Target, TargetKind
from imexdra.cli.workloads import (
    JOB_NAME_LABEL,
    MPIJOB_NAME_LABEL,
    Consumer,
    MPIJob,
    decode_deployment,
    decode_job,
    decode_mpijob,
    fetch_consumers,
)
from imexdra.common.kube.client import PermanentApiError
from imexdra.common.kube.models.apps_v1 import Deployment
from imexdra.common.kube.models.batch_v1 import Job
from imexdra.common.kube.models.core_v1 import Namespace, Pod
from tests.unit.cli import objects as o

POD_TEMPLATE = {
    "spec": {
        "containers": [{"name": "main", "image": "busybox"}],
        "resourceClaims": [{"name": "imex", "resourceClaimTemplateName": "train-channel"}],
    }
}


def job() -> Job:
    return Job.from_dict(
        {"metadata": {"name": "train", "namespace": "team-a"}, "spec": {"template": POD_TEMPLATE}}
    )


def deployment() -> Deployment:
    spec = {"selector": {"matchLabels": {"app": "serve"}}, "template": POD_TEMPLATE}
    return Deployment.from_dict({"metadata": {"name": "serve", "namespace": "team-a"}, "spec": spec})


def mpijob() -> Any:
    replicas = {"Worker": {"replicas": 2, "template": POD_TEMPLATE}, "Launcher": {"template": POD_TEMPLATE}}
    return MPIJob.from_dict(
        {
            "apiVersion": "kubeflow.org/v2beta1",
            "kind": "MPIJob",
            "metadata": {"name": "nccl", "namespace": "team-a"},
            "spec": {"mpiReplicaSpecs": replicas},
        }
    )


@pytest.mark.parametrize(
    ("workload", "selector", "roles"),
    [
        (decode_job(job()), {JOB_NAME_LABEL: "train"}, [""]),
        (decode_deployment(deployment()), {"app": "serve"}, [""]),
        (decode_mpijob(mpijob()), {MPIJOB_NAME_LABEL: "nccl"}, ["Launcher", "Worker"]),
    ],
    ids=["job", "deployment", "mpijob"],
)
def test_workloads_decode_to_selector_and_templates(
    workload: Any, selector: dict[str, str], roles: list[str]
) -> None:
    """Each kind's pod selector, and its typed pod templates (an MPIJob's sorted by replica type)."""
    assert dict(workload.selector) == selector
    assert [role for role, _ in workload.templates] == roles
    assert all(
        spec.resourceClaims[0].resourceClaimTemplateName == "train-channel" for _, spec in workload.templates
    )


class _Client:
    """Gets and lists canned objects by resource; lists filter by labels as the API server does."""

    def __init__(self, objects: dict[Any, list[Any]]) -> None:
        self.objects = objects

    async def get(self, resource: Any, name: str, *, namespace: str) -> Any:
        for item in self.objects.get(resource, []):
            if item.metadata.name == name:
                return item
        raise PermanentApiError("404 NotFound", code=404)

    async def list(self, resource: Any, **selectors: Any) -> AsyncIterator[Any]:
        wanted = selectors.get("labels") or {}
        for item in self.objects.get(resource, []):
            labels = item.metadata.labels or {}
            if all(labels.get(key) == value for key, value in wanted.items()):
                yield item


def labels(consumers: list[Consumer]) -> list[str]:
    return [c.label for c in consumers]


async def test_workload_resolves_to_its_pods_by_label() -> None:
    """A Job's pods are those labelled with its name; other pods of the namespace are left out."""
    pods = [
        o.pod("train-a", labels={JOB_NAME_LABEL: "train"}),
        o.pod("other", labels={JOB_NAME_LABEL: "other"}),
    ]
    client = _Client({Job: [job()], Pod: pods})
    found = await fetch_consumers(client, Target(TargetKind.JOB, "team-a", "train"))  # type: ignore[arg-type]
    assert found is not None
    consumers, from_templates = found
    assert (labels(consumers), from_templates) == (["pod train-a"], False)
    assert consumers[0].pod is pods[0]


async def test_workload_without_pods_gives_its_templates() -> None:
    """An MPIJob whose pods do not exist yet: one consumer per replica type's pod template."""
    client = _Client({MPIJob: [mpijob()], Pod: [o.pod("stray")]})
    found = await fetch_consumers(client, Target(TargetKind.MPIJOB, "team-a", "nccl"))  # type: ignore[arg-type]
    assert found is not None
    consumers, from_templates = found
    assert labels(consumers) == [
        "pod template of mpijob/nccl (Launcher)",
        "pod template of mpijob/nccl (Worker)",
    ]
    assert from_templates is True
    assert all(c.pod is None for c in consumers)


async def test_namespace_keeps_pods_with_claims() -> None:
    """``--all`` checks every pod with resourceClaims, sorted by name; pods without claims are left out."""
    pods = [o.pod("b"), o.pod("plain", template=None), o.pod("a")]
    client = _Client({Namespace: [Namespace.from_dict({"metadata": {"name": "team-a"}})], Pod: pods})
    found = await fetch_consumers(client, Target(TargetKind.NAMESPACE, "team-a", "team-a"))  # type: ignore[arg-type]
    assert found is not None
    assert labels(found[0]) == ["pod a", "pod b"]


@pytest.mark.parametrize(
    "kind", [TargetKind.POD, TargetKind.JOB, TargetKind.DEPLOYMENT, TargetKind.NAMESPACE]
)
async def test_absent_target_is_none(kind: TargetKind) -> None:
    """A 404 for the target itself is None (the command exits 4)."""
    assert await fetch_consumers(_Client({}), Target(kind, "team-a", "gone")) is None  # type: ignore[arg-type]


async def test_workload_with_an_empty_selector_gives_its_templates() -> None:
    """A Deployment selecting by matchExpressions only never claims every pod of the namespace."""
    raw = deployment().to_dict()
    raw["spec"]["selector"] = {"matchExpressions": [{"key": "app", "operator": "Exists"}]}
    client = _Client({Deployment: [Deployment.from_dict(raw)], Pod: [o.pod("stray")]})
    found = await fetch_consumers(client, Target(TargetKind.DEPLOYMENT, "team-a", "serve"))  # type: ignore[arg-type]
    assert found is not None
    assert (labels(found[0]), found[1]) == (["pod template of deployment/serve"], True)
