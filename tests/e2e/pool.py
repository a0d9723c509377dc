"""The e2e tier's racks, brought up once per run of consecutive modules that ask for the same one.

A rack's bring-up (control plane, kubelets, hardware, MPI Operator, the chart) is the tier's largest
fixed cost; several modules ask for the same rack configuration (``tests/e2e/racks.py``). The session
orders the modules so that those sharing a configuration run one after another
(:func:`order_by_rack`); the first brings the rack up, each one after it gets it back emptied of the
workloads the previous module left (:func:`reset`), and the last one stops it, so only one rack runs
at a time. docs/testing.md "Shared racks" says why and what a module may leave behind.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from imexdra_sim import rack
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.e2e.helpers import COMPUTE_DOMAIN_LABEL, is_ready
from tests.support.kubectl import get_json
from tests.support.session import progress
from tests.support.waiting import wait_until

#: Rack fixtures of ``tests/e2e/conftest.py`` the pool serves, by fixture name.
RackFixtures = dict[str, rack.RackConfig]

#: The module node ids whose rack the module run after it takes over (set at collection).
_HANDED_ON = pytest.StashKey[frozenset[str]]()


def order_by_rack(config: pytest.Config, items: list[pytest.Item], fixtures: RackFixtures) -> None:
    """Reorder the e2e items by :func:`module_order`; record which modules hand their rack on."""
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::")[0], []).append(item)
    ordered, config.stash[_HANDED_ON] = module_order(
        {module: _rack_config(group, fixtures) for module, group in modules.items()}
    )
    items[:] = [item for module in ordered for item in modules[module]]


def module_order(racks: dict[str, rack.RackConfig | None]) -> tuple[list[str], frozenset[str]]:
    """The modules (by id, with the rack each uses, None for none) in the order to run them.

    Modules whose racks differ only in chart values run back to back; within such a group modules of
    the very same configuration run next to each other (fewest switches); the groups keep the order
    of their first module. Also returned: the modules whose rack the module after them takes over.
    """
    machine = {m: repr(_machine(c)) if c is not None else m for m, c in racks.items()}
    exact = {m: repr(c) if c is not None else m for m, c in racks.items()}
    ordered = sorted(racks, key=lambda module: (_first(machine, module), _first(exact, module)))
    pairs = itertools.pairwise(ordered)
    return ordered, frozenset(module for module, after in pairs if machine[module] == machine[after])


def _first(keys: dict[str, str], module: str) -> int:
    """The position of the first module whose key is ``module``'s."""
    return list(keys.values()).index(keys[module])


def handed_on(config: pytest.Config, module_nodeid: str) -> bool:
    """Whether the module run after ``module_nodeid`` takes over its rack."""
    return module_nodeid in config.stash.get(_HANDED_ON, frozenset())


def _rack_config(module_items: list[pytest.Item], fixtures: RackFixtures) -> rack.RackConfig | None:
    """The one pooled rack configuration a module uses; None if it uses none, or two."""
    names = {name for item in module_items if isinstance(item, pytest.Function) for name in item.fixturenames}
    used = {repr(fixtures[name]): fixtures[name] for name in names if name in fixtures}
    return next(iter(used.values())) if len(used) == 1 else None


def _machine(config: rack.RackConfig) -> rack.RackConfig:
    """The part of a rack configuration only a new bring-up can change: all but the chart's values."""
    return dataclasses.replace(config, extra_values={}, values_files=())


@dataclass
class _Up:
    config: rack.RackConfig
    cluster: LocalCluster
    teardown: Iterator[LocalCluster]
    namespaces: frozenset[str]
    """The namespaces right after bring-up: anything else a module made goes before the next one."""
    revision: int
    """The chart release's revision ``config`` installed: a newer one means a module upgraded it."""


class RackPool:
    """At most one rack up: the one the current module asked for."""

    def __init__(
        self, pytestconfig: pytest.Config, bring_up: Callable[[rack.RackConfig], Iterator[LocalCluster]]
    ) -> None:
        self._pytestconfig = pytestconfig
        self._bring_up = bring_up
        self._up: _Up | None = None

    def rack(self, config: rack.RackConfig) -> LocalCluster:
        """The rack of ``config``: the one up, its chart's values switched if need be, else a new one.

        The values are switched when ``config``'s differ, or when the module before upgraded the release
        (``upgrade_chart``) and so left other values behind.
        """
        up = self._up
        if up is not None and _machine(up.config) == _machine(config):
            if up.config != config or rack.release_revision(up.cluster) != up.revision:
                progress(
                    self._pytestconfig,
                    f"switching the rack in {up.cluster.run_dir} to other chart values ...",
                )
                switch_values(up.cluster, config)
                up.config, up.revision = config, rack.release_revision(up.cluster)
            return up.cluster
        self.stop()
        teardown = self._bring_up(config)
        cluster = next(teardown)
        self._up = _Up(
            config, cluster, teardown, frozenset(namespaces(cluster)), rack.release_revision(cluster)
        )
        return cluster

    def hand_on(self) -> None:
        """Empty the rack of the current module's workloads for the next module (:func:`reset`)."""
        assert self._up is not None
        progress(self._pytestconfig, f"handing the rack in {self._up.cluster.run_dir} to the next module ...")
        try:
            reset(self._up.cluster, self._up.namespaces)
        except BaseException:  # pytest.fail raises an OutcomeException, not an Exception
            self.stop()  # the next module brings up a rack of its own
            raise

    def stop(self) -> None:
        """Stop the rack that is up, if any (its logs kept when a test failed meanwhile)."""
        up, self._up = self._up, None
        if up is not None:
            next(up.teardown, None)


def switch_values(cluster: LocalCluster, config: rack.RackConfig) -> None:
    """Reinstall the rack's release with ``config``'s values; wait until every slice follows its gate."""
    rack.reinstall_values(cluster, config)
    gates = rack.chart_values(config).get("featureGates", {})
    on = bool(gates.get("ComputeDomainBindingConditions", False))
    wait_until(
        "every node's slice following the binding-conditions gate",
        lambda: rack.slices_follow_gate(cluster, on),
    )


def namespaces(cluster: LocalCluster) -> list[str]:
    """The names of the cluster's namespaces."""
    return cluster.kubectl("get", "namespaces", "-o", "jsonpath={.items[*].metadata.name}").stdout.split()


def reset(cluster: LocalCluster, keep: frozenset[str], timeout: float = 240) -> None:
    """Leave the rack as its bring-up left it: namespaces not in ``keep`` and every ComputeDomain gone.

    Every node then offers its channel again and carries no domain's label; the driver's own pods are
    Ready. Raises (failing the module that left the rack) if that cannot be reached within ``timeout``.
    """
    # Namespaces first, all at once: each may hold a domain that labels nodes, so waiting for the labels
    # to go after one of them (as remove_workloads does) would wait on the others' domains.
    extra = [name for name in namespaces(cluster) if name not in keep]
    if extra:
        cluster.kubectl("delete", "namespaces", *extra, "--wait=true", timeout=timeout)
    cluster.kubectl("delete", "computedomains", "--all", "--all-namespaces", "--wait=true", timeout=timeout)
    wait_until(
        "no node labelled for a ComputeDomain",
        lambda: not cluster.kubectl("get", "nodes", "-l", COMPUTE_DOMAIN_LABEL, "-o", "name").stdout.strip(),
        timeout=timeout,
    )
    wait_until(
        "the driver's pods Ready and no IMEX daemon left",
        lambda: _driver_only(cluster),
        timeout=timeout,
    )


def _driver_only(cluster: LocalCluster) -> bool:
    pods = get_json(cluster, "pods", "-n", rack.DRIVER_NAMESPACE)["items"]
    return bool(pods) and all(is_ready(pod) and not _is_daemon(pod) for pod in pods)


def _is_daemon(pod: dict[str, Any]) -> bool:
    return COMPUTE_DOMAIN_LABEL in (pod["metadata"].get("labels") or {})
