"""The deletion-order state machine of a ComputeDomain, as a pure planner.

Given what the caches show about a terminating domain's objects, ``plan_deletion`` says what may be
done now; the reconciler executes that and runs again when the caches change. The order is upstream's
(docs/data-path.md §13; for a host-managed domain the daemon side is simply empty):

0. while pods use the domain's channel (in-use protection, docs/in-use-protection.md): nothing, but
   say who holds it;
1. delete the workload ResourceClaimTemplate, the daemon ResourceClaimTemplate and the DaemonSet;
2. remove the domain's label from every node carrying it;
3. once no node is labelled: remove our finalizer from the workload template, but only once it is
   marked for deletion ("must be marked for deletion before removing the finalizer");
4. once the workload template is gone: the same for the daemon template and the DaemonSet;
5. once the DaemonSet is gone: delete the domain's cliques (ours: the controller writes them);
6. once all of that is gone from the caches: remove the domain's finalizer and forget its metrics.

Deliberate differences: the daemon template is deleted even when its DaemonSet is missing (upstream
leaves it when a crash hit between the two creates), and cliques are deleted explicitly instead of
waiting for garbage collection, so "the domain is gone" implies "nothing is left".
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from imexdra.controller.placement import Kind


@dataclass(frozen=True, slots=True)
class Owned:
    """One owned object as the caches show it."""

    kind: Kind
    namespace: str
    name: str
    #: Has a deletionTimestamp (or we already asked for its deletion).
    terminating: bool = False
    #: Still carries the ``resource.nvidia.com/computeDomain`` finalizer.
    finalized: bool = True

    def __str__(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class DeletionView:
    """Everything of one terminating domain that is still in the caches."""

    objects: tuple[Owned, ...] = ()
    labelled_nodes: tuple[str, ...] = ()
    #: ``namespace/name`` of the pods using the domain's channel (empty when protection is off).
    users: tuple[str, ...] = ()

    def of(self, *kinds: Kind) -> list[Owned]:
        """The objects of the given kinds."""
        return [o for o in self.objects if o.kind in kinds]


@dataclass(frozen=True, slots=True)
class Delete:
    """Ask the API server to delete an object."""

    target: Owned

    def __str__(self) -> str:
        return f"delete {self.target}"


@dataclass(frozen=True, slots=True)
class RemoveFinalizer:
    """Remove our finalizer from a terminating object."""

    target: Owned

    def __str__(self) -> str:
        return f"remove the finalizer of {self.target}"


@dataclass(frozen=True, slots=True)
class RemoveNodeLabel:
    """Remove the domain's label from a node."""

    node: str

    def __str__(self) -> str:
        return f"remove the label of node {self.node}"


@dataclass(frozen=True, slots=True)
class FinalizeDomain:
    """Remove the domain's own finalizer and forget its metrics: the last step."""


@dataclass(frozen=True, slots=True)
class HoldForUsers:
    """Keep everything: these pods still use the domain's channel."""

    pods: tuple[str, ...]


Action = Delete | RemoveFinalizer | RemoveNodeLabel | FinalizeDomain | HoldForUsers


def _deletes(objects: Iterable[Owned]) -> list[Action]:
    return [Delete(o) for o in objects if not o.terminating]


def _finalizer_removals(objects: Iterable[Owned]) -> list[Action]:
    return [RemoveFinalizer(o) for o in objects if o.terminating and o.finalized]


def plan_deletion(view: DeletionView) -> list[Action]:
    """What may be done now; an empty plan means "wait for the caches to change"."""
    if view.users:
        return [HoldForUsers(view.users)]
    if not view.objects and not view.labelled_nodes:
        return [FinalizeDomain()]
    workload = view.of(Kind.WORKLOAD_TEMPLATE)
    daemon_side = view.of(Kind.DAEMON_TEMPLATE, Kind.DAEMON_SET)
    daemon_sets = view.of(Kind.DAEMON_SET)
    plan: list[Action] = [*_deletes(workload), *_deletes(daemon_side)]
    plan.extend(RemoveNodeLabel(node) for node in sorted(view.labelled_nodes))
    if not view.labelled_nodes:
        plan.extend(_finalizer_removals(workload))
        if not workload:
            plan.extend(_finalizer_removals(daemon_side))
    if not daemon_sets:
        plan.extend(_deletes(view.of(Kind.CLIQUE)))
    return plan
