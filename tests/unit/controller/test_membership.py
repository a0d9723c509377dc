"""Index assignment, clique planning and status computation (the pure core of the sync)."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from imexdra.api.computedomain import ComputeDomainNode
from imexdra.api.computedomainclique import ComputeDomainDaemonInfo
from imexdra.api.constants import ComputeDomainStatusValue
from imexdra.controller import membership
from tests.unit.controller.support import CLIQUE, member

READY = ComputeDomainStatusValue.READY
NOT_READY = ComputeDomainStatusValue.NOT_READY


def entry(node: str, index: int, ip: str = "10.9.9.9") -> ComputeDomainDaemonInfo:
    return ComputeDomainDaemonInfo(node_name=node, ip_address=ip, clique_id=CLIQUE, index=index, status=READY)


def indices(
    existing: Sequence[ComputeDomainDaemonInfo], nodes: Sequence[str], max_nodes: int = 18
) -> dict[str, int]:
    result = membership.assign_indices(CLIQUE, existing, [member(n) for n in nodes], max_nodes=max_nodes)
    return {d.node_name: d.index for d in result.daemons}


@pytest.mark.parametrize(
    ("existing", "nodes", "expected"),
    [
        ([], ["c", "a", "b"], {"a": 0, "b": 1, "c": 2}),
        ([entry("c", 0), entry("a", 2)], ["a", "b", "c"], {"c": 0, "b": 1, "a": 2}),
        ([entry("a", 0), entry("b", 1), entry("c", 2)], ["a", "c", "d"], {"a": 0, "d": 1, "c": 2}),
        ([entry("a", 5)], ["a", "b"], {"a": 5, "b": 0}),
        ([entry("a", 1), entry("b", 1)], ["a", "b"], {"a": 1, "b": 0}),
        ([entry("a", 18), entry("b", -1)], ["a", "b"], {"a": 0, "b": 1}),
        ([entry("a", 3), entry("a", 4)], ["a"], {"a": 3}),
        ([entry("gone", 0)], ["a"], {"a": 0}),
    ],
    ids=[
        "fresh-by-node-name",
        "recovered-indices-kept",
        "departed-index-refilled",
        "gap-below-kept",
        "duplicate-index-healed",
        "out-of-range-reassigned",
        "duplicate-node-first-wins",
        "departed-frees-index",
    ],
)
def test_assign_indices(
    existing: list[ComputeDomainDaemonInfo], nodes: list[str], expected: dict[str, int]
) -> None:
    """Live nodes keep valid indices; everyone else gets the lowest free one in node-name order."""
    assert indices(existing, nodes) == expected


def test_members_beyond_the_bound_are_unplaced() -> None:
    """With max 2, a third node gets no entry and is reported unplaced."""
    result = membership.assign_indices(CLIQUE, [], [member("a"), member("b"), member("c")], max_nodes=2)
    assert [d.node_name for d in result.daemons] == ["a", "b"]
    assert result.unplaced == ("c",)


def test_entries_carry_ip_clique_and_readiness_sorted_by_index() -> None:
    """An entry mirrors the pod: its current IP (not the recorded one), clique ID and readiness."""
    result = membership.assign_indices(
        CLIQUE,
        [entry("b", 0, ip="10.0.0.99")],
        [member("a", "10.0.0.1", ready=False), member("b", "10.0.0.2")],
        max_nodes=18,
    )
    assert result.daemons == (
        ComputeDomainDaemonInfo(
            node_name="b", ip_address="10.0.0.2", clique_id=CLIQUE, index=0, status=READY
        ),
        ComputeDomainDaemonInfo(
            node_name="a", ip_address="10.0.0.1", clique_id=CLIQUE, index=1, status=NOT_READY
        ),
    )


node_names = st.lists(st.sampled_from([f"n{i:02d}" for i in range(24)]), unique=True, max_size=24)


@given(before=node_names, after=node_names, max_nodes=st.integers(min_value=1, max_value=20))
def test_indices_are_unique_bounded_and_stable(before: list[str], after: list[str], max_nodes: int) -> None:
    """Any membership change keeps indices unique and in range, and never renumbers a staying node."""
    first = membership.assign_indices(CLIQUE, [], [member(n) for n in before], max_nodes=max_nodes)
    second = membership.assign_indices(CLIQUE, first.daemons, [member(n) for n in after], max_nodes=max_nodes)
    placed = [d.index for d in second.daemons]
    assert len(placed) == len(set(placed))
    assert all(0 <= i < max_nodes for i in placed)
    assert len(placed) == min(len(after), max_nodes)
    old = {d.node_name: d.index for d in first.daemons}
    assert all(old[d.node_name] == d.index for d in second.daemons if d.node_name in old)


def test_plan_cliques_groups_members_and_skips_unannounced() -> None:
    """Fabric members go to their clique, empty clique IDs are non-fabric, unannounced pods are ignored."""
    other = "7b0c2e4a-1111-4222-8333-444455556666.2"
    members = [member("a"), member("b", clique=other), member("c", clique=""), member("d", clique=None)]
    cliques, non_fabric = membership.plan_cliques(members, {}, max_nodes=18)
    assert {cid: [d.node_name for d in c.daemons] for cid, c in cliques.items()} == {
        CLIQUE: ["a"],
        other: ["b"],
    }
    assert [m.node_name for m in non_fabric] == ["c"]


def test_status_nodes_lists_cliques_then_non_fabric_nodes() -> None:
    """status.nodes copies clique entries 1:1 and adds non-fabric nodes with index -1 and an empty clique."""
    cliques, non_fabric = membership.plan_cliques(
        [member("b", "10.0.0.2"), member("a", "10.0.0.1", ready=False), member("z", "10.0.0.3", clique="")],
        {},
        max_nodes=18,
    )
    assert membership.status_nodes(cliques, non_fabric) == [
        ComputeDomainNode(name="a", ip_address="10.0.0.1", clique_id=CLIQUE, index=0, status=NOT_READY),
        ComputeDomainNode(name="b", ip_address="10.0.0.2", clique_id=CLIQUE, index=1, status=READY),
        ComputeDomainNode(name="z", ip_address="10.0.0.3", clique_id="", index=-1, status=READY),
    ]


def test_indices_recover_from_status_when_cliques_are_off() -> None:
    """With the cliques gate off, status.nodes is the record the indices are recovered from."""
    nodes = [
        ComputeDomainNode(name="a", ip_address="10.0.0.1", clique_id=CLIQUE, index=4, status=READY),
        ComputeDomainNode(name="z", ip_address="10.0.0.3", clique_id="", index=-1, status=READY),
    ]
    published = membership.published_from_status(nodes)
    assert list(published) == [CLIQUE]
    cliques, _ = membership.plan_cliques([member("a"), member("b")], published, max_nodes=18)
    assert {d.node_name: d.index for d in cliques[CLIQUE].daemons} == {"a": 4, "b": 0}


def node(name: str, status: ComputeDomainStatusValue) -> ComputeDomainNode:
    return ComputeDomainNode(name=name, ip_address="10.0.0.1", clique_id=CLIQUE, index=0, status=status)


@pytest.mark.parametrize(
    ("nodes", "num_nodes", "expected"),
    [
        ([], 0, READY),
        ([], 2, NOT_READY),
        ([node("a", READY)], 2, NOT_READY),
        ([node("a", READY), node("b", READY)], 2, READY),
        ([node("a", READY), node("b", NOT_READY)], 1, NOT_READY),
        ([node("a", READY), node("b", READY), node("c", READY)], 2, READY),
    ],
    ids=[
        "zero-of-zero",
        "none-of-two",
        "one-of-two",
        "two-of-two",
        "one-not-ready",
        "more-than-asked",
    ],
)
def test_global_status(
    nodes: list[ComputeDomainNode], num_nodes: int, expected: ComputeDomainStatusValue
) -> None:
    """Upstream's rule: fewer nodes than numNodes or any NotReady node is NotReady."""
    assert membership.global_status(nodes, num_nodes=num_nodes) is expected


def test_same_nodes_ignores_order_but_not_content() -> None:
    """Node lists compare as maps by name."""
    a, b = node("a", READY), node("b", READY)
    assert membership.same_nodes([a, b], [b, a])
    assert not membership.same_nodes([a, b], [b, node("a", NOT_READY)])
    assert not membership.same_nodes([a], [a, b])


def test_only_fabric_entries_changing_is_a_rollup_the_cliques_carry() -> None:
    """A fabric node joining, leaving or turning Ready is carried by its clique; a non-fabric one is not."""
    a, b = node("a", NOT_READY), node("b", READY)
    lone = ComputeDomainNode(name="z", ip_address="10.0.0.9", clique_id="", index=-1, status=NOT_READY)
    carried = membership.cliques_carry_the_change
    assert carried([a], [a, b])
    assert carried([a, b], [b])
    assert carried([a, b], [b, node("a", READY)])
    assert carried([a, lone], [b, lone])
    assert not carried([a], [a, lone])
    assert not carried([a, lone], [a])
    assert not carried([a, lone], [a, msgspec.structs.replace(lone, status=READY)])
