"""When the membership sync writes a domain's cliques and status (docs/architecture.md §5.1).

The sync runs against stand-ins of what it reads and writes: caches holding daemon pods and cliques,
and a writer that applies each write to them and counts it. A manual clock replaces time.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from imexdra.api.constants import ComputeDomainStatusValue
from imexdra.controller.config import ControllerConfig
from imexdra.controller.metrics import DomainStatusMetrics
from imexdra.controller.sync import MembershipSync
from tests.unit.controller.support import UID, Events, make_config, make_domain, member
from tests.unit.controller.syncfakes import Caches, Clock, Writer

READY = ComputeDomainStatusValue.READY
NOT_READY = ComputeDomainStatusValue.NOT_READY


@dataclass
class Harness:
    sync: MembershipSync
    caches: Caches
    writer: Writer
    clock: Clock
    config: ControllerConfig

    async def step(self) -> float | None:
        """One pass of the sync over the domain as last written; returns the requeue it asks for."""
        self.writer.log.clear()
        return await self.sync.sync(self.writer.domain)

    def status_nodes(self) -> dict[str, ComputeDomainStatusValue]:
        status = self.writer.domain.status
        return {n.name: n.status for n in status.nodes} if status else {}


@pytest.fixture
def harness() -> Harness:
    config = make_config()
    caches = Caches()
    domain = make_domain()
    assert domain.metadata is not None and domain.spec is not None
    domain.metadata.uid = UID
    domain.spec.num_nodes = 3
    writer = Writer(caches, domain)
    clock = Clock()
    sync = MembershipSync(
        config,
        caches,  # type: ignore[arg-type]
        writer,  # type: ignore[arg-type]
        events=Events(),  # type: ignore[arg-type]
        metrics=DomainStatusMetrics(),
        clock=clock,
    )
    return Harness(sync, caches, writer, clock, config)


async def test_a_fabric_node_joining_goes_out_in_its_clique_and_the_status_follows_on_the_rollup(
    harness: Harness,
) -> None:
    """The first status is written at once; a later join of a fabric node is written to its clique at
    once and to the status only when the roll-up interval since the last status write has passed."""
    harness.caches.pods = [member("a", ready=False)]
    assert await harness.step() is None
    assert harness.writer.log == ["clique", "status"]

    harness.clock.now += harness.config.min_publish_interval
    harness.caches.pods.append(member("b", ready=False))
    delay = await harness.step()
    assert harness.writer.log == ["clique"]
    rollup = harness.config.status_rollup_interval
    assert delay is not None and delay == pytest.approx(rollup - harness.config.min_publish_interval)
    assert list(harness.status_nodes()) == ["a"]

    harness.clock.now += delay
    assert await harness.step() is None
    assert harness.writer.log == ["status"]
    assert list(harness.status_nodes()) == ["a", "b"]


async def test_a_change_of_the_global_status_is_never_held_back(harness: Harness) -> None:
    """The last daemon turning Ready makes the domain Ready: clique and status go out in one pass."""
    harness.caches.pods = [member(n, ready=False) for n in "abc"]
    await harness.step()
    harness.clock.now += harness.config.min_publish_interval
    harness.caches.pods = [member(n, ready=True) for n in "abc"]
    assert await harness.step() is None
    assert harness.writer.log == ["clique", "status"]
    status = harness.writer.domain.status
    assert status is not None and status.status is READY


async def test_a_non_fabric_nodes_entry_is_never_held_back(harness: Harness) -> None:
    """A node without a clique is ready only by ``status.nodes``: its entry is written at once."""
    harness.caches.pods = [member("a", ready=False)]
    await harness.step()
    harness.clock.now += harness.config.min_publish_interval
    harness.caches.pods.append(member("z", clique="", ready=False))
    assert await harness.step() is None
    assert harness.writer.log == ["status"]
    assert harness.status_nodes() == {"a": NOT_READY, "z": NOT_READY}
