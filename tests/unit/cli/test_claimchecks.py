"""Verdicts of ``imexdra diagnose TYPE/NAME`` on a workload's IMEX claim, from realistic objects.

Aspects covered, one verdict each: a healthy pod; a template that does not exist (with and without a
ComputeDomain naming it); a template with no ComputeDomain behind it (unknown domainID, no channel
config, owned by another domain than the one naming it); a DeviceClass that does not exist (and which
of ours do); an opaque config the driver rejects (the driver's own error text); an allocated claim
whose pod sits with Prepare errors (newest Warning events quoted); a pod without any IMEX claim; a
workload without pods (its template checked); the YAML that would work.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from imexdra.api.opaque import decode_opaque_config
from imexdra.cli.claimchecks import WorkloadReport, diagnose_workload, missing_target_finding
from imexdra.cli.diagnose import has_problems
from imexdra.cli.findings import Severity
from imexdra.cli.targets import Target, TargetKind
from imexdra.cli.workloads import Consumer, WorkloadView, pod_consumer, template_consumer
from imexdra.common.errors import ConfigError
from tests.unit.cli import objects as o

READY = {"status": "Ready", "nodes": [o.status_node("node-a", 0)]}
POD_TARGET = Target(TargetKind.POD, "team-a", "worker-0")
CHANNEL_PARAMS = o.channel_config()["opaque"]["parameters"]


def running_pod(name: str = "worker-0", **overrides: Any) -> Any:
    """A Running, Ready pod with claim ``imex`` from ``train-channel``."""
    fields: dict[str, Any] = {"node_name": "node-a", "phase": "Running", "ready": True}
    return o.pod(name, **{**fields, **overrides})


def view(*consumers: Consumer, target: Target = POD_TARGET, **overrides: Any) -> WorkloadView:
    """One healthy Ready domain ``train`` with its template, the chart's classes; changed by ``overrides``."""
    fields: dict[str, Any] = {
        "target": target,
        "consumers": list(consumers) or [pod_consumer(running_pod())],
        "templates": {"train-channel": o.claim_template()},
        "claims": {},
        "domains": [o.domain(status=READY)],
        "device_classes": o.chart_device_classes(),
        "events": [],
    }
    fields.update(overrides)
    return WorkloadView(**fields)


def problems(report: WorkloadReport) -> list[str]:
    return [f"{f.severity}: {f.message}" for f in report.findings if f.is_problem]


def test_healthy_pod_names_the_domain_behind_its_template() -> None:
    """Template, class, config and domain all in place and the pod Running: nothing to report."""
    report = diagnose_workload(view())
    assert problems(report) == []
    assert not report.suggestions
    assert report.checked == ["pod worker-0"]
    [info] = [f.message for f in report.findings if "is behind" in f.message]
    assert info.startswith(
        "ComputeDomain team-a/train (status Ready) is behind ResourceClaimTemplate team-a/"
    )


def test_missing_template_without_a_domain_suggests_one() -> None:
    """No template and no domain naming it: the error says so and the suggested YAML creates the domain."""
    pod = o.pod("worker-0", template="mpi-channel")
    report = diagnose_workload(view(pod_consumer(pod)))
    [error] = problems(report)
    assert error == (
        "error: ResourceClaimTemplate team-a/mpi-channel (used by pod worker-0 (claim imex)) does not exist, "
        "and no ComputeDomain in team-a names it; the ComputeDomains here name: train-channel (train)"
    )
    [suggestion] = report.suggestions
    domain, stanza = yaml.safe_load_all(suggestion.to_yaml())
    assert domain == {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": "mpi", "namespace": "team-a"},
        "spec": {"channel": {"resourceClaimTemplate": {"name": "mpi-channel"}}},
    }
    assert stanza["resourceClaims"] == [{"name": "imex", "resourceClaimTemplateName": "mpi-channel"}]
    assert stanza["containers"] == [{"name": "main", "resources": {"claims": [{"name": "imex"}]}}]


def test_missing_template_of_an_existing_domain_points_at_the_domain() -> None:
    """A domain names the template but it is not there yet: diagnose the domain, no YAML suggested."""
    report = diagnose_workload(view(templates={}))
    [error] = [f for f in report.findings if f.is_problem]
    assert "does not exist, though ComputeDomain team-a/train names it" in error.message
    assert "imexdra diagnose computedomain/train -n team-a" in error.hint
    assert report.suggestions == []


@pytest.mark.parametrize(
    ("template", "message"),
    [
        (
            o.claim_template("mpi-channel", uid=o.OTHER_UID),
            f"names domainID {o.OTHER_UID} in its ComputeDomainChannelConfig, but no ComputeDomain has "
            "that UID",
        ),
        (
            o.claim_template("mpi-channel", uid=None),
            "asks for an IMEX channel but carries no ComputeDomainChannelConfig: no ComputeDomain is "
            "behind it",
        ),
    ],
    ids=["unknown-domain-id", "hand-written-without-config"],
)
def test_template_without_a_domain_behind_it(template: Any, message: str) -> None:
    """A template whose config names no live domain, or that has no config: error plus the YAML that works."""
    pod = o.pod("worker-0", template="mpi-channel")
    report = diagnose_workload(view(pod_consumer(pod), templates={"mpi-channel": template}))
    [error] = problems(report)
    assert message in error
    assert [s.template for s in report.suggestions] == ["mpi-channel"]


def test_template_a_domain_names_but_does_not_own_is_a_conflict() -> None:
    """The domain naming the template is not the one its domainID names: delete it (ClaimTemplateConflict)."""
    report = diagnose_workload(view(templates={"train-channel": o.claim_template(uid=o.OTHER_UID)}))
    [error] = [f for f in report.findings if f.is_problem]
    assert f"names domainID {o.OTHER_UID}, not the UID of ComputeDomain team-a/train" in error.message
    assert "ClaimTemplateConflict" in error.hint
    assert report.suggestions == []


@pytest.mark.parametrize(
    ("classes", "hint"),
    [
        (
            o.chart_device_classes(),
            "compute-domain-daemon.nvidia.com, compute-domain-default-channel.nvidia.com",
        ),
        ([], "this cluster has no ComputeDomain DeviceClass: is the driver installed?"),
    ],
    ids=["lists-ours", "none-installed"],
)
def test_missing_device_class_lists_the_classes_that_exist(classes: list[Any], hint: str) -> None:
    """A misspelt DeviceClass: the error names it, the hint lists the cluster's ComputeDomain classes."""
    template = o.claim_template(device_class="compute-domain-channel-default.nvidia.com")
    report = diagnose_workload(view(templates={"train-channel": template}, device_classes=classes))
    missing = [f for f in report.findings if f.message.startswith("DeviceClass ")]
    [finding] = missing
    assert finding.severity is Severity.ERROR
    assert (
        "compute-domain-channel-default.nvidia.com (request channel of ResourceClaimTemplate"
        in finding.message
    )
    assert hint in finding.hint
    assert "gpu.nvidia.com" not in finding.hint.replace("compute-domain", "")


@pytest.mark.parametrize(
    "parameters",
    [
        {**CHANNEL_PARAMS, "unexpectedField": "foo"},
        {**CHANNEL_PARAMS, "allocationMode": "Some"},
        {**CHANNEL_PARAMS, "apiVersion": "resource.nvidia.com/v1"},
        {**CHANNEL_PARAMS, "domainID": ""},
    ],
    ids=["unknown-field", "bad-allocation-mode", "wrong-api-version", "empty-domain-id"],
)
def test_opaque_config_the_driver_rejects_prints_its_error(parameters: dict[str, Any]) -> None:
    """The config is decoded by the driver's own strict decoding and its error printed as Prepare words it."""
    with pytest.raises(ConfigError) as caught:
        decode_opaque_config(parameters)
    report = diagnose_workload(view(templates={"train-channel": o.claim_template(parameters=parameters)}))
    [error] = problems(report)
    assert error.endswith(
        f"has an opaque config the driver rejects: error decoding config parameters: {caught.value}"
    )
    assert report.suggestions == []


def test_allocated_claim_with_prepare_errors_quotes_the_newest_warnings() -> None:
    """A Pending pod whose channel is allocated: the claim's devices and the newest Warning of each reason."""
    pod = o.pod("worker-0", node_name="node-a", waiting="ContainerCreating", claim_status="worker-0-imex-x1")
    claim = o.claim("worker-0-imex-x1", reserved_for=(("worker-0", "uid-worker-0"),))
    events = [
        o.event("worker-0", "FailedPrepareDynamicResources", "an older failure", "2026-03-01T10:01:00Z"),
        o.event(
            "worker-0",
            "FailedPrepareDynamicResources",
            "NodePrepareResources failed for claim team-a/worker-0-imex-x1: "
            'strict decoding error: unknown field "x"',
            "2026-03-01T10:02:00Z",
        ),
        o.event(
            "worker-0",
            "FailedPrepareDynamicResources",
            "about an earlier pod",
            "2026-03-01T10:03:00Z",
            pod_uid="old",
        ),
    ]
    report = diagnose_workload(view(pod_consumer(pod), claims={claim.metadata.name: claim}, events=events))
    [stuck] = [f for f in report.findings if f.is_problem]
    lines = stuck.message.splitlines()
    assert lines[0] == "pod worker-0 is stuck: Pending, ContainerCreating, on node node-a"
    assert lines[1] == "  claim imex: ResourceClaim worker-0-imex-x1 allocated node-a/channel-0"
    assert lines[2].startswith('  Warning FailedPrepareDynamicResources: "NodePrepareResources failed')
    assert len(lines) == 3
    assert stuck.hint.startswith("the channel is allocated but the kubelet plugin on the pod's node failed")
    assert "opaque config has a field this driver does not know" in stuck.hint


def test_unscheduled_pod_with_no_claim_yet_quotes_the_scheduler() -> None:
    """Not yet scheduled, claim not generated: says so and quotes FailedScheduling."""
    pod = o.pod("worker-0")
    events = [o.event("worker-0", "FailedScheduling", "0/3 nodes are available", "2026-03-01T10:02:00Z")]
    report = diagnose_workload(view(pod_consumer(pod), events=events))
    [stuck] = [f.message for f in report.findings if f.is_problem]
    assert stuck.splitlines()[1:] == [
        "  claim imex: no ResourceClaim yet",
        '  Warning FailedScheduling: "0/3 nodes are available"',
    ]


def test_pod_without_an_imex_claim_gets_a_suggestion_but_is_skipped_in_a_namespace() -> None:
    """Only a GPU claim: a warning and the YAML for ``pod/NAME``; ``--all`` leaves such pods out."""
    gpu = o.claim_template("gpu", device_class="gpu.nvidia.com", uid=None)
    pod = running_pod(template="gpu")
    report = diagnose_workload(view(pod_consumer(pod), templates={"gpu": gpu}))
    assert problems(report) == [
        "warning: pod worker-0 asks for no IMEX channel: none of its resourceClaims is a ComputeDomain's"
    ]
    assert [s.template for s in report.suggestions] == ["worker-0-channel"]
    namespace = Target(TargetKind.NAMESPACE, "team-a", "team-a")
    in_namespace = diagnose_workload(view(pod_consumer(pod), target=namespace, templates={"gpu": gpu}))
    assert not has_problems(in_namespace.findings)
    assert in_namespace.checked == []


def test_workload_without_pods_checks_its_template_and_names_users_once() -> None:
    """No pods yet: the pod templates are checked, a shared missing template is one finding."""
    job = Target(TargetKind.MPIJOB, "team-a", "nccl")
    spec = o.pod("x", template="nccl-channel").spec
    consumers = [template_consumer(job, role, spec) for role in ("Launcher", "Worker")]
    report = diagnose_workload(view(*consumers, target=job, templates={}, from_templates=True))
    assert report.findings[0].message == "mpijob/nccl has no pods yet: checked its pod templates"
    [error] = problems(report)
    assert (
        "(used by pod template of mpijob/nccl (Launcher) (claim imex), pod template of mpijob/nccl (Worker)"
        in error
    )
    [suggestion] = report.suggestions
    assert suggestion.location == "spec.mpiReplicaSpecs.<Launcher|Worker>.template.spec of mpijob/nccl"


def test_many_users_of_one_template_are_shortened() -> None:
    """Five pods sharing a missing template: three named, then a count."""
    consumers = [pod_consumer(o.pod(f"w-{i}", template="gone")) for i in range(5)]
    [error] = problems(diagnose_workload(view(*consumers)))
    assert "pod w-2 (claim imex) and 2 more)" in error


def test_missing_direct_claim_is_an_error() -> None:
    """A pod naming a ResourceClaim (resourceClaimName) that does not exist."""
    pod = o.pod("worker-0", template=None, claim_name="shared-imex")
    [error] = problems(diagnose_workload(view(pod_consumer(pod))))
    assert (
        error == "error: ResourceClaim team-a/shared-imex (used by pod worker-0 (claim imex)) does not exist"
    )


@pytest.mark.parametrize(
    ("target", "hint"),
    [
        (Target(TargetKind.MPIJOB, "team-a", "nccl"), "MPI Operator"),
        (Target(TargetKind.NAMESPACE, "team-b", "team-b"), "kubectl get namespaces"),
    ],
    ids=["mpijob", "namespace"],
)
def test_missing_target_finding(target: Target, hint: str) -> None:
    """The finding for an absent target names it by kind and key."""
    finding = missing_target_finding(target)
    assert finding.message == f"{target.kind} {target.key} does not exist"
    assert hint in finding.hint
