"""Reading daemon pods under the daemon contract: who is a live member, announced, fabric, ready."""

from __future__ import annotations

import datetime as dt

import pytest

from imexdra.common.kube.models.core_v1 import (
    ContainerState,
    ContainerStateTerminated,
    ContainerStateWaiting,
    ContainerStatus,
    Pod,
)
from imexdra.controller.daemons import daemon_pod, one_per_node
from tests.unit.controller.support import CLIQUE, UID, make_pod, member


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({}, (UID, "node-a", "10.0.0.1", CLIQUE, True)),
        ({"ready": False}, (UID, "node-a", "10.0.0.1", CLIQUE, False)),
        ({"phase": "Pending", "ready": True}, (UID, "node-a", "10.0.0.1", CLIQUE, False)),
        ({"clique": ""}, (UID, "node-a", "10.0.0.1", "", True)),
        ({"clique": None}, (UID, "node-a", "10.0.0.1", None, True)),
        ({"deleting": True}, None),
        ({"ip": None}, None),
        ({"node": None}, None),
        ({"phase": "Failed"}, None),
        ({"phase": "Succeeded"}, None),
        ({"uid_label": None}, None),
        ({"uid_label": ""}, None),
    ],
    ids=[
        "ready-fabric",
        "not-ready",
        "ready-condition-but-pending",
        "non-fabric",
        "not-announced",
        "terminating",
        "no-ip-yet",
        "unscheduled",
        "failed",
        "succeeded",
        "no-domain-label",
        "empty-domain-label",
    ],
)
def test_daemon_pod_classification(overrides: dict[str, object], expected: tuple[object, ...] | None) -> None:
    """A pod is a member only when live, scheduled, addressed and labelled; Ready needs phase Running."""
    found = daemon_pod(make_pod(**overrides))  # type: ignore[arg-type]
    if expected is None:
        assert found is None
    else:
        assert found is not None
        assert (found.domain_uid, found.node_name, found.ip_address, found.clique_id, found.ready) == expected


def test_fabric_flag_follows_the_clique_label() -> None:
    """Only a non-empty clique ID is a fabric member; empty and absent are not."""
    assert member("a").fabric
    assert not member("a", clique="").fabric
    assert not member("a", clique=None).fabric


def test_one_per_node_prefers_ready_then_newest() -> None:
    """During a pod handover on one node the ready pod speaks, else the newest; output is by node."""
    old = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    new = old + dt.timedelta(minutes=1)
    pods = [
        daemon_pod(make_pod(node="b", name="b-old", created=old, ready=True)),
        daemon_pod(make_pod(node="b", name="b-new", created=new, ready=False)),
        daemon_pod(make_pod(node="a", name="a-old", created=old, ready=False)),
        daemon_pod(make_pod(node="a", name="a-new", created=new, ready=False)),
    ]
    chosen = one_per_node(p for p in pods if p is not None)
    assert [p.name for p in chosen] == ["a-new", "b-old"]


def _with_container(
    pod: Pod,
    *,
    ready: bool,
    exit_code: int | None = None,
    message: str = "",
    reason: str = "",
    waiting: ContainerStateWaiting | None = None,
) -> Pod:
    """``pod`` with one daemon container: its last exit (``exit_code``...) and current ``waiting`` state."""
    assert pod.status is not None
    terminated = (
        ContainerStateTerminated(exitCode=exit_code, message=message or None, reason=reason or None)
        if exit_code is not None
        else None
    )
    pod.status.containerStatuses = [
        ContainerStatus(
            name="compute-domain-daemon",
            image="imexdra:0.1.0",
            imageID="",
            ready=ready,
            restartCount=3,
            lastState=ContainerState(terminated=terminated),
            state=ContainerState(waiting=waiting) if waiting else None,
        )
    ]
    return pod


@pytest.mark.parametrize(
    ("ready", "exit_code", "message", "reason", "failure"),
    [
        (False, 1, "nvidia-imex not found\n", "Error", "nvidia-imex not found"),
        (False, 137, "", "OOMKilled", "exited with code 137 (OOMKilled)"),
        (False, 2, "", "", "exited with code 2"),
        (True, 1, "old failure", "Error", ""),
        (False, 0, "", "Completed", ""),
        (False, None, "", "", ""),
    ],
    ids=["termination-message", "no-message", "no-reason", "ready-again", "clean-exit", "never-exited"],
)
def test_failure_is_the_last_non_zero_exit_while_not_ready(
    ready: bool, exit_code: int | None, message: str, reason: str, failure: str
) -> None:
    """A failing daemon's termination message (else its exit code) is what the controller reports."""
    pod = make_pod(ready=ready)
    found = daemon_pod(_with_container(pod, ready=ready, exit_code=exit_code, message=message, reason=reason))
    assert found is not None and found.failure == failure


@pytest.mark.parametrize(
    ("reason", "message", "failure"),
    [
        (
            "CreateContainerError",
            "failed to create containerd container: CDI device injection failed: unresolvable CDI devices\n",
            "CreateContainerError: failed to create containerd container: CDI device injection failed: "
            "unresolvable CDI devices",
        ),
        ("ErrImageNeverPull", "", "ErrImageNeverPull"),
        ("ContainerCreating", "", ""),
        ("CrashLoopBackOff", "back-off 10s", ""),
    ],
    ids=["cdi-refused", "no-message", "still-creating", "crash-loop-without-exit"],
)
def test_failure_names_a_container_the_node_cannot_create(reason: str, message: str, failure: str) -> None:
    """A waiting reason that means the runtime refused the container is reported with its message."""
    waiting = ContainerStateWaiting(reason=reason, message=message or None)
    found = daemon_pod(_with_container(make_pod(ready=False), ready=False, waiting=waiting))
    assert found is not None and found.failure == failure
