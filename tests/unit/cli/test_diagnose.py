"""Findings of ``imexdra diagnose`` from realistic objects.

Aspects covered: deletion with finalizers, NotReady with too few nodes, host-managed semantics (no
daemons expected, Ready means admitted), the daemon DaemonSet and its pods, the workload template,
which pods belong to the domain, nodes without a clique label, node-label conflicts with another
domain, and stuck pods quoting the newest scheduler/kubelet event of each reason.
"""

from __future__ import annotations

import pytest

from imexdra.cli.clusterview import ImexMode
from imexdra.cli.diagnose import (
    diagnose,
    has_problems,
    missing_domain_finding,
    render_text,
    workload_pods,
)
from imexdra.cli.findings import Finding, Severity
from tests.unit.cli import objects as o
from tests.unit.cli.objects import READY_STATUS, view


def problems(findings: list[Finding]) -> list[str]:
    return [f"{f.severity}: {f.message}" for f in findings if f.is_problem]


def test_healthy_domain_has_no_problem() -> None:
    """Ready status, a DaemonSet with Ready pods and Running workloads: nothing to report."""
    findings = diagnose(view())
    assert problems(findings) == []
    assert not has_problems(findings)
    assert "no problem found" in render_text("team-a/train", findings)


def test_missing_domain_is_an_error() -> None:
    """The finding for a missing domain names it."""
    finding = missing_domain_finding("team-a", "nope")
    assert finding.severity is Severity.ERROR
    assert "team-a/nope does not exist" in finding.message


def test_deleting_domain_names_its_finalizers() -> None:
    """A deletionTimestamp with finalizers is reported as a hanging deletion."""
    findings = diagnose(view(domain=o.domain(status=READY_STATUS, deleting=True), daemonsets=[]))
    [deleting] = problems(findings)
    assert "being deleted" in deleting
    assert "resource.nvidia.com/computeDomain" in deleting


def test_a_deleted_domain_in_use_names_the_pods_and_the_way_out() -> None:
    """Terminating with claims reserved for pods: a warning naming them, how to end it, the opt-out."""
    claims = [
        o.claim(f"worker-{i}-imex", reserved_for=((f"worker-{i}", f"uid-worker-{i}"),)) for i in range(12)
    ]
    domain = o.domain(status=READY_STATUS, deleting=True)
    findings = diagnose(view(domain=domain, claims=claims))
    [in_use] = [f for f in findings if "holding the domain's channel" in f.message]
    assert in_use.severity is Severity.WARNING
    assert in_use.message.startswith("deletion waits for 12 pod(s) still holding the domain's channel: ")
    assert "team-a/worker-0, team-a/worker-1" in in_use.message and in_use.message.endswith(" and 2 more")
    assert "delete the workload" in in_use.hint
    assert "resources.computeDomains.inUseProtection=false" in in_use.hint
    assert not [f for f in diagnose(view(claims=claims)) if "holding" in f.message]  # not being deleted


def test_a_lost_node_of_the_domain_is_named_with_its_condition() -> None:
    """A node whose Ready is Unknown, where a worker and a daemon run: one warning with both pods."""
    lost = ("Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")
    nodes = {
        "node-a": o.gpu_node("node-a", domain_uid=o.UID, ready=lost),
        "node-b": o.gpu_node("node-b", domain_uid=o.UID, ready=("True", "KubeletReady", "")),
    }
    [finding] = [f for f in diagnose(view(nodes=nodes)) if f.message.startswith("node node-a")]
    assert finding.message == (
        "node node-a is not Ready (Unknown, NodeStatusUnknown, Kubelet stopped posting node status.); "
        "pods of the domain on it: imexdra/cd-daemon-a, team-a/worker-0"
    )
    assert "docs/node-loss.md" in finding.hint
    assert not [f for f in diagnose(view(nodes=nodes)) if f.message.startswith("node node-b")]


def test_not_ready_with_too_few_nodes() -> None:
    """NotReady with fewer status nodes than numNodes says how many joined and which."""
    cd = o.domain(num_nodes=3, status={"status": "NotReady", "nodes": [o.status_node("node-a", 0)]})
    [message] = problems(diagnose(view(domain=cd)))
    assert message == "error: status NotReady: 1 of numNodes=3 nodes have joined (node-a)"


def test_not_ready_daemons_are_named() -> None:
    """Enough nodes but a NotReady one: the NotReady daemons are listed."""
    status = {
        "status": "NotReady",
        "nodes": [o.status_node("node-a", 0), o.status_node("node-b", 1, ready=False)],
    }
    [message] = problems(diagnose(view(domain=o.domain(status=status))))
    assert message == "error: IMEX daemons NotReady on: node-b"


def test_missing_status_is_a_warning() -> None:
    """A domain the controller never reconciled has no status."""
    [message] = problems(diagnose(view(domain=o.domain())))
    assert message == "warning: ComputeDomain has no status yet"


def test_missing_daemonset_in_driver_managed_mode() -> None:
    """Driver-managed: no DaemonSet labelled with the domain UID is an error naming the expected one."""
    [message] = problems(diagnose(view(daemonsets=[], daemon_pods=[])))
    assert message == f"error: daemon DaemonSet imexdra/computedomain-daemon-{o.UID} does not exist"


def test_host_managed_mode_expects_no_daemons() -> None:
    """Host-managed (docs/host-managed.md): no DaemonSet is normal, and Ready only means admitted (info)."""
    findings = diagnose(view(imex_mode=ImexMode.HOST_MANAGED, daemonsets=[], daemon_pods=[]))
    assert problems(findings) == []
    assert any(f.severity is Severity.INFO and "host-managed" in f.message for f in findings)


def test_host_managed_not_ready_points_at_the_workload_template() -> None:
    """Host-managed NotReady means no workload template of its own: the hint names the likely clash."""
    domain = o.domain(status={"status": "NotReady"})
    messages = problems(diagnose(view(domain=domain, imex_mode=ImexMode.HOST_MANAGED, daemonsets=[])))
    assert messages == [
        "warning: status NotReady: under host-managed IMEX a domain is Ready once its workload "
        "ResourceClaimTemplate exists"
    ]
    [finding] = [f for f in diagnose(view(domain=domain, imex_mode=ImexMode.HOST_MANAGED)) if f.is_problem]
    assert "ClaimTemplateConflict" in finding.hint


def test_unknown_mode_is_a_warning_but_checks_daemons() -> None:
    """Without the driver's DeviceClasses the mode is unknown: say so, and still look for daemons."""
    messages = problems(diagnose(view(imex_mode=ImexMode.UNKNOWN, daemonsets=[])))
    assert [m.split(":")[0] for m in messages] == ["warning", "error"]
    assert "cannot tell the IMEX mode" in messages[0]


def test_daemon_pod_not_ready_shows_its_state() -> None:
    """A daemon pod without the Ready condition is reported with its waiting reason and node."""
    daemon = o.pod("cd-daemon-b", o.DRIVER_NS, template=None, node_name="node-b", waiting="ContainerCreating")
    [message] = problems(diagnose(view(daemon_pods=[daemon])))
    assert (
        message
        == "error: daemon pod imexdra/cd-daemon-b is not Ready (Pending, ContainerCreating, on node node-b)"
    )


def test_missing_workload_template() -> None:
    """Pods cannot get a channel claim while the workload template is missing."""
    [message] = problems(diagnose(view(template_exists=False)))
    assert message == "error: workload ResourceClaimTemplate team-a/train-channel does not exist"


def test_workload_pods_by_template_or_by_claim_config() -> None:
    """A pod belongs to the domain through its template or a claim carrying the domain's UID."""
    pods = [
        o.pod("by-template"),
        o.pod("by-claim", template=None, claim_name="shared-imex"),
        o.pod("other-claim", template=None, claim_name="foreign-imex"),
        o.pod("other-template", template="another-channel"),
    ]
    claims = [o.claim("shared-imex"), o.claim("foreign-imex", uid=o.OTHER_UID)]
    assert [p.metadata.name for p in workload_pods(o.domain(), pods, claims)] == ["by-claim", "by-template"]


def test_no_workload_pods_is_only_information() -> None:
    """A domain nobody uses yet is not a problem."""
    findings = diagnose(view(pods=[o.pod("unrelated", template="other")]))
    assert problems(findings) == []
    assert "no pods use the domain's channel template train-channel" in [f.message for f in findings]


def test_node_without_clique_label_where_a_workload_runs() -> None:
    """A workload pod on a node without nvidia.com/gpu.clique gets one warning per node."""
    nodes = {"node-a": o.gpu_node("node-a", clique_label=False), "node-b": o.gpu_node("node-b")}
    pods = [o.pod(f"w{i}", node_name="node-a", phase="Running", ready=True) for i in range(2)]
    assert problems(diagnose(view(nodes=nodes, pods=pods))) == [
        "warning: node node-a (pod w0) has no nvidia.com/gpu.clique label"
    ]


def test_node_label_of_another_domain_blocks_a_pending_pod() -> None:
    """A pending pod on a node labelled for another domain reports the conflict, naming that domain."""
    other = o.domain("infer", "team-b", uid=o.OTHER_UID)
    nodes = {"node-c": o.gpu_node("node-c", domain_uid=o.OTHER_UID)}
    stuck = o.pod("worker-2", node_name="node-c", waiting="ContainerCreating")
    messages = problems(diagnose(view(nodes=nodes, pods=[stuck], all_domains=[other])))
    assert messages[0] == (
        f"error: node node-c is labelled resource.nvidia.com/computeDomain={o.OTHER_UID} (team-b/infer) "
        "while pod worker-2 of this domain is pending there"
    )
    assert messages[1].startswith("error: pod worker-2 is stuck: Pending, ContainerCreating, on node node-c")


def test_node_label_conflict_is_ignored_in_host_managed_mode() -> None:
    """Host-managed IMEX does not label nodes, so a leftover label is not this pod's problem."""
    nodes = {"node-c": o.gpu_node("node-c", domain_uid=o.OTHER_UID)}
    stuck = o.pod("worker-2", node_name="node-c")
    messages = problems(diagnose(view(imex_mode=ImexMode.HOST_MANAGED, nodes=nodes, pods=[stuck])))
    assert [m for m in messages if "is labelled" in m] == []


ALL_REFUSED = (
    'error preparing devices for claim team-a/worker-0-imex-abcde: permanent error: allocationMode "All" '
    "is not supported under HostManagedIMEX"
)


def test_stuck_pod_quotes_the_newest_event_of_each_reason() -> None:
    """Only the newest FailedPrepareDynamicResources and FailedScheduling messages are quoted."""
    stuck = o.pod("worker-0", node_name="node-a", waiting="ContainerCreating")
    events = [
        o.event(
            "worker-0",
            "FailedScheduling",
            "0/2 nodes are available: cannot allocate all claims",
            "2026-03-01T10:00:00Z",
        ),
        o.event("worker-0", "FailedPrepareDynamicResources", "older failure", "2026-03-01T10:01:00Z"),
        o.event("worker-0", "FailedPrepareDynamicResources", ALL_REFUSED, "2026-03-01T10:05:00Z"),
        o.event("worker-0", "Scheduled", "Successfully assigned", "2026-03-01T10:02:00Z"),
        o.event(
            "worker-0",
            "FailedPrepareDynamicResources",
            "from a deleted pod",
            "2026-03-01T10:09:00Z",
            pod_uid="old",
        ),
    ]
    [finding] = [f for f in diagnose(view(pods=[stuck], events=events)) if "stuck" in f.message]
    assert finding.message.splitlines() == [
        "pod worker-0 is stuck: Pending, ContainerCreating, on node node-a",
        '  FailedScheduling: "0/2 nodes are available: cannot allocate all claims"',
        f'  FailedPrepareDynamicResources: "{ALL_REFUSED}"',
    ]
    assert "allocationMode Single" in finding.hint


def test_unscheduled_pod_with_strict_decoding_error() -> None:
    """An unscheduled pod is reported as such, with a hint matched to the quoted error."""
    stuck = o.pod("worker-1")
    message = 'strict decoding error: unknown field "allocationMod"'
    events = [o.event("worker-1", "FailedScheduling", message, "2026-03-01T10:00:00Z")]
    [finding] = [f for f in diagnose(view(pods=[stuck], events=events)) if f.is_problem]
    assert finding.message.startswith("pod worker-1 is stuck: Pending, not scheduled")
    assert message in finding.message
    assert "opaque config" in finding.hint


@pytest.mark.parametrize(
    ("severity", "problem"), [(Severity.ERROR, True), (Severity.WARNING, True), (Severity.INFO, False)]
)
def test_errors_and_warnings_are_problems(severity: Severity, problem: bool) -> None:
    """Exit code 1 follows from errors and warnings, not from information."""
    assert has_problems([Finding(severity, "m")]) is problem
    assert Finding(severity, "m", "h").to_json() == {"severity": str(severity), "message": "m", "hint": "h"}


@pytest.mark.parametrize(
    ("reason", "hint"),
    [
        ("ChannelsExhausted", "raise NVreg_ImexChannelCount"),
        ("AllocationModeUnsupported", "allocationMode: Single"),
        ("ChannelConflict", "delete the younger one"),
        ("IsolationMismatch", "set the isolation back"),
        ("NamespaceQuotaExceeded", "raise resources.computeDomains.maxPerNamespace"),
    ],
)
def test_a_false_channel_condition_is_explained(reason: str, hint: str) -> None:
    """Channel isolation's ChannelAllocated=False: the reason and message, and what would work."""
    condition = {
        "type": "ChannelAllocated",
        "status": "False",
        "lastTransitionTime": "2026-03-01T10:00:00Z",
        "reason": reason,
        "message": "all 3 channels are held by team-b/x, team-c/y, team-d/z",
    }
    domain = o.domain(status={"status": "NotReady", "nodes": [], "conditions": [condition]})
    [finding] = [f for f in diagnose(view(domain=domain)) if "ChannelAllocated" in f.message]
    assert finding.severity is Severity.ERROR
    assert f"condition ChannelAllocated is False: {reason}: all 3 channels are held by" in finding.message
    assert hint in finding.hint


def test_a_true_channel_condition_is_no_finding() -> None:
    """ChannelAllocated=True (the domain has its channel) adds nothing."""
    condition = {
        "type": "ChannelAllocated",
        "status": "True",
        "lastTransitionTime": "2026-03-01T10:00:00Z",
        "reason": "ChannelAllocated",
        "message": "channel 7",
    }
    domain = o.domain(status={**READY_STATUS, "channel": 7, "conditions": [condition]})
    assert problems(diagnose(view(domain=domain))) == []
