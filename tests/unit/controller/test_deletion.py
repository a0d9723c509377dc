"""The deletion-order state machine: single steps by table, whole teardowns by simulation."""

from __future__ import annotations

import dataclasses
import random

import pytest

from imexdra.controller.deletion import (
    Action,
    Delete,
    DeletionView,
    FinalizeDomain,
    HoldForUsers,
    Owned,
    RemoveFinalizer,
    RemoveNodeLabel,
    plan_deletion,
)
from imexdra.controller.placement import Kind

WL = Owned(Kind.WORKLOAD_TEMPLATE, "team-a", "cd-channel")
DRCT = Owned(Kind.DAEMON_TEMPLATE, "drv", "computedomain-daemon-u")
DS = Owned(Kind.DAEMON_SET, "drv", "computedomain-daemon-u")
CLIQUE = Owned(Kind.CLIQUE, "drv", "u.c", finalized=False)


def terminating(obj: Owned) -> Owned:
    return dataclasses.replace(obj, terminating=True)


@pytest.mark.parametrize(
    ("view", "plan"),
    [
        (DeletionView(), [FinalizeDomain()]),
        (
            DeletionView((WL, DRCT, DS, CLIQUE), ("node-b", "node-a")),
            [Delete(WL), Delete(DRCT), Delete(DS), RemoveNodeLabel("node-a"), RemoveNodeLabel("node-b")],
        ),
        (
            DeletionView((terminating(WL), terminating(DRCT), terminating(DS)), ("node-a",)),
            [RemoveNodeLabel("node-a")],
        ),
        (
            DeletionView((terminating(WL), terminating(DRCT), terminating(DS), CLIQUE)),
            [RemoveFinalizer(terminating(WL))],
        ),
        (
            DeletionView((terminating(DRCT), terminating(DS), CLIQUE)),
            [RemoveFinalizer(terminating(DRCT)), RemoveFinalizer(terminating(DS))],
        ),
        (DeletionView((CLIQUE,)), [Delete(CLIQUE)]),
        (DeletionView((DRCT,)), [Delete(DRCT)]),
        (DeletionView((dataclasses.replace(terminating(WL), finalized=False),)), []),
        (DeletionView((WL,)), [Delete(WL)]),
        (DeletionView((terminating(WL),)), [RemoveFinalizer(terminating(WL))]),
    ],
    ids=[
        "nothing-left-finalize",
        "first-pass-deletes-and-unlabels",
        "labels-before-any-finalizer",
        "workload-finalizer-first",
        "then-daemon-finalizers",
        "cliques-after-daemonset",
        "orphan-daemon-template-deleted",
        "wait-for-foreign-finalizers",
        "host-managed-delete",
        "host-managed-remove-finalizer",
    ],
)
def test_plan_step(view: DeletionView, plan: list[Action]) -> None:
    """Each state allows exactly the next steps of upstream's order."""
    assert plan_deletion(view) == plan


def simulate(objects: set[Owned], nodes: set[str], rng: random.Random) -> list[Action]:
    """Apply plans to a world where a random subset of each step's effects lands before the next look."""
    done: list[Action] = []
    for _ in range(200):
        plan = plan_deletion(DeletionView(tuple(sorted(objects, key=str)), tuple(sorted(nodes))))
        if plan == [FinalizeDomain()]:
            return [*done, FinalizeDomain()]
        for action in plan:
            if rng.random() < 0.4:
                continue  # this write failed or its watch event is late: the next pass sees old state
            done.append(action)
            if isinstance(action, RemoveNodeLabel):
                nodes.discard(action.node)
            elif isinstance(action, Delete):
                objects.discard(action.target)
                if action.target.finalized:
                    objects.add(terminating(action.target))
            elif isinstance(action, RemoveFinalizer):
                objects.discard(action.target)
    raise AssertionError("deletion did not converge")


@pytest.mark.parametrize("seed", range(20))
def test_teardown_respects_upstream_order(seed: int) -> None:
    """Whatever lands when, labels go before finalizers, workload before daemon side, the domain last."""
    rng = random.Random(seed)
    objects = {WL, DRCT, DS, CLIQUE, dataclasses.replace(CLIQUE, name="u.d")}
    actions = simulate(objects, {"node-a", "node-b"}, rng)
    position = {repr(a): i for i, a in enumerate(actions)}
    last_label = max(i for i, a in enumerate(actions) if isinstance(a, RemoveNodeLabel))
    finalizers = [i for i, a in enumerate(actions) if isinstance(a, RemoveFinalizer)]
    assert min(finalizers) > last_label
    workload_gone = position[repr(RemoveFinalizer(terminating(WL)))]
    assert position[repr(RemoveFinalizer(terminating(DS)))] > workload_gone
    assert position[repr(RemoveFinalizer(terminating(DRCT)))] > workload_gone
    clique_deletes = [
        i for i, a in enumerate(actions) if isinstance(a, Delete) and a.target.kind is Kind.CLIQUE
    ]
    assert min(clique_deletes) > position[repr(RemoveFinalizer(terminating(DS)))]
    assert actions[-1] == FinalizeDomain()
    assert sum(isinstance(a, FinalizeDomain) for a in actions) == 1


@pytest.mark.parametrize(
    "view",
    [
        DeletionView((WL, DRCT, DS, CLIQUE), ("node-a",), ("team-a/w-0",)),
        DeletionView((terminating(WL), terminating(DS)), (), ("team-a/w-0",)),
        DeletionView((), (), ("team-a/w-0",)),
    ],
    ids=["untouched-domain", "half-torn-down", "nothing-owned-left"],
)
def test_pods_using_the_channel_hold_everything(view: DeletionView) -> None:
    """Step 0 (in-use protection): while pods use the channel, nothing is deleted, unlabelled or finalized."""
    assert plan_deletion(view) == [HoldForUsers(("team-a/w-0",))]


def test_teardown_resumes_in_order_once_the_pods_are_gone() -> None:
    """Without users the same view plans upstream's first step again."""
    held = DeletionView((WL, DRCT, DS, CLIQUE), ("node-a",), ("team-a/w-0",))
    released = dataclasses.replace(held, users=())
    assert plan_deletion(released) == [Delete(WL), Delete(DRCT), Delete(DS), RemoveNodeLabel("node-a")]
