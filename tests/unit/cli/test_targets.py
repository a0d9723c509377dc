"""What ``imexdra diagnose`` is asked about: the TARGET argument, ``-n`` and ``--all``, end to end.

Aspects covered: ``NAME`` and ``NS/NAME`` keep meaning a ComputeDomain; kubectl's ``TYPE/NAME`` with
its aliases; ``namespace/NS`` and ``--all``; usage errors (exit 2); the workload report's outputs and
exit codes through the command (the cluster replaced by a canned view).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from click.testing import CliRunner

from imexdra.cli import clusterview
from imexdra.cli import main as cli_main
from imexdra.cli.clusterview import EXIT_NOT_FOUND, EXIT_PROBLEMS
from imexdra.cli.targets import Target, TargetKind, parse_target
from imexdra.cli.workloads import WorkloadView, pod_consumer
from tests.unit.cli import objects as o


def context_namespace() -> str:
    return "ctx-ns"


@pytest.mark.parametrize(
    ("argument", "namespace", "expected"),
    [
        ("train", None, Target(TargetKind.COMPUTE_DOMAIN, "ctx-ns", "train")),
        ("train", "team-a", Target(TargetKind.COMPUTE_DOMAIN, "team-a", "train")),
        ("team-a/train", None, Target(TargetKind.COMPUTE_DOMAIN, "team-a", "train")),
        ("cd/train", "team-a", Target(TargetKind.COMPUTE_DOMAIN, "team-a", "train")),
        ("pod/worker-0", None, Target(TargetKind.POD, "ctx-ns", "worker-0")),
        ("po/worker-0", "team-a", Target(TargetKind.POD, "team-a", "worker-0")),
        ("Job/train", "team-a", Target(TargetKind.JOB, "team-a", "train")),
        ("jobs.batch/train", "team-a", Target(TargetKind.JOB, "team-a", "train")),
        ("mpijob/nccl", "team-a", Target(TargetKind.MPIJOB, "team-a", "nccl")),
        ("mpijobs.kubeflow.org/nccl", "team-a", Target(TargetKind.MPIJOB, "team-a", "nccl")),
        ("deploy/serve", "team-a", Target(TargetKind.DEPLOYMENT, "team-a", "serve")),
        ("namespace/team-b", None, Target(TargetKind.NAMESPACE, "team-b", "team-b")),
        ("ns/team-b", "team-b", Target(TargetKind.NAMESPACE, "team-b", "team-b")),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_target_forms(argument: str, namespace: str | None, expected: Target) -> None:
    """The original ComputeDomain forms, and TYPE/NAME with kubectl's spellings."""
    assert (
        parse_target(argument, namespace=namespace, all_pods=False, default_namespace=context_namespace)
        == expected
    )


@pytest.mark.parametrize(("namespace", "expected"), [(None, "ctx-ns"), ("team-a", "team-a")])
def test_all_is_the_namespace(namespace: str | None, expected: str) -> None:
    """``--all`` diagnoses ``-n``'s namespace, else the context's."""
    target = parse_target(None, namespace=namespace, all_pods=True, default_namespace=context_namespace)
    assert target == Target(TargetKind.NAMESPACE, expected, expected)
    assert (target.key, target.ref) == (expected, f"namespace/{expected}")


@pytest.mark.parametrize(
    ("argument", "namespace", "all_pods", "message"),
    [
        (None, None, False, "give a TARGET"),
        ("pod/x", None, True, "give no TARGET with it"),
        ("team-a/train", "team-b", False, "contradicts -n team-b"),
        ("namespace/team-a", "team-b", False, "contradicts -n team-b"),
        ("pod/", None, False, "expected pod/NAME"),
        ("a/b/c", None, False, "neither NAMESPACE/NAME nor TYPE/NAME"),
    ],
    ids=[
        "nothing",
        "all-and-target",
        "ns-contradiction",
        "namespace-contradiction",
        "no-name",
        "two-slashes",
    ],
)
def test_usage_errors(argument: str | None, namespace: str | None, all_pods: bool, message: str) -> None:
    """Contradicting or missing arguments are click usage errors (exit code 2)."""
    with pytest.raises(click.UsageError, match=message):
        parse_target(argument, namespace=namespace, all_pods=all_pods, default_namespace=context_namespace)


def canned(view: WorkloadView | None, monkeypatch: pytest.MonkeyPatch) -> list[str | None]:
    """Make the command see ``view`` instead of a cluster; returns the contexts it was run with."""
    contexts: list[str | None] = []

    def run_with_client(_kubeconfig: Path | None, _work: Callable[..., Any], *, context: str | None) -> Any:
        contexts.append(context)
        return view

    monkeypatch.setattr(clusterview, "run_with_client", run_with_client)
    return contexts


def missing_template_view(target: Target) -> WorkloadView:
    pod = o.pod("worker-0", template="mpi-channel")
    return WorkloadView(
        target=target,
        consumers=[pod_consumer(pod)],
        templates={},
        claims={},
        domains=[],
        device_classes=o.chart_device_classes(),
    )


def test_pod_report_json_carries_findings_and_the_yaml_that_works(monkeypatch: pytest.MonkeyPatch) -> None:
    """``diagnose pod/NAME -o json``: target, what was checked, the error and the YAML that works; exit 1."""
    canned(missing_template_view(Target(TargetKind.POD, "team-a", "worker-0")), monkeypatch)
    result = CliRunner().invoke(cli_main.main, ["diagnose", "pod/worker-0", "-n", "team-a", "-o", "json"])
    assert result.exit_code == EXIT_PROBLEMS, result.output
    document = json.loads(result.output)
    assert (document["target"], document["kind"], document["found"]) == ("pod/worker-0", "Pod", True)
    assert document["checked"] == ["pod worker-0"]
    assert document["problems"] is True
    [suggestion] = document["suggestions"]
    assert suggestion["computeDomain"]["spec"] == {
        "channel": {"resourceClaimTemplate": {"name": "mpi-channel"}}
    }
    assert list(yaml.safe_load_all(suggestion["yaml"])) == [
        suggestion["computeDomain"],
        suggestion["podSpec"],
    ]


def test_workload_text_report_ends_with_the_yaml(monkeypatch: pytest.MonkeyPatch) -> None:
    """The text report names the target and prints the YAML after the findings."""
    canned(missing_template_view(Target(TargetKind.JOB, "team-a", "train")), monkeypatch)
    result = CliRunner().invoke(cli_main.main, ["diagnose", "job/train", "-n", "team-a"])
    assert result.exit_code == EXIT_PROBLEMS, result.output
    head, _, tail = result.output.partition("# YAML that would work (template mpi-channel):\n")
    assert head.startswith(
        "Job team-a/train: 1 problem(s) found\n[ERROR] ResourceClaimTemplate team-a/mpi-channel"
    )
    domain, stanza = yaml.safe_load_all(tail)
    assert domain["kind"] == "ComputeDomain"
    assert stanza["resourceClaims"][0]["resourceClaimTemplateName"] == "mpi-channel"


def test_missing_workload_exits_4(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pod, workload or namespace that does not exist is exit code 4, like a missing domain."""
    canned(None, monkeypatch)
    result = CliRunner().invoke(cli_main.main, ["diagnose", "mpijob/nccl", "-n", "team-a", "-o", "yaml"])
    assert result.exit_code == EXIT_NOT_FOUND, result.output
    document = yaml.safe_load(result.output)
    assert (document["found"], document["findings"][0]["message"]) == (
        False,
        "MPIJob team-a/nccl does not exist",
    )


def test_all_with_a_target_is_a_usage_error_before_any_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--all`` with a TARGET exits 2 without touching the cluster."""
    contexts = canned(None, monkeypatch)
    result = CliRunner().invoke(cli_main.main, ["diagnose", "pod/x", "--all", "-n", "team-a"])
    assert result.exit_code == 2
    assert "give no TARGET with it" in result.output
    assert contexts == []
