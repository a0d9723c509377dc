"""The order the e2e tier runs its modules in, so that racks are shared (tests/e2e/pool.py)."""

from __future__ import annotations

from imexdra_sim.rack import RackConfig
from tests.e2e.pool import module_order

PLAIN = RackConfig(nodes=2)
GATED = RackConfig(nodes=2, extra_values={"featureGates": {"ComputeDomainBindingConditions": True}})
BIG = RackConfig(nodes=4)


def test_modules_of_one_machine_run_back_to_back_and_hand_their_rack_on() -> None:
    """Modules whose racks differ only in values are grouped; each hands on to the next in its group."""
    ordered, handed_on = module_order({"a": PLAIN, "b": BIG, "c": GATED, "d": None, "e": PLAIN})
    assert ordered == ["a", "e", "c", "b", "d"]
    assert handed_on == {"a", "e"}


def test_the_same_configuration_runs_before_a_values_switch() -> None:
    """Within a group the modules of one exact configuration are adjacent: one switch, not two."""
    ordered, handed_on = module_order({"a": GATED, "b": PLAIN, "c": GATED})
    assert ordered == ["a", "c", "b"]
    assert handed_on == {"a", "c"}


def test_a_module_without_a_pooled_rack_shares_nothing() -> None:
    """Modules using no pooled rack keep their place and neither take nor hand on a rack."""
    ordered, handed_on = module_order({"x": None, "y": None, "a": PLAIN})
    assert ordered == ["x", "y", "a"]
    assert handed_on == frozenset()
