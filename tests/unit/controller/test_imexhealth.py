"""IMEX health in the controller: the IMEXPeersConnected roll-up, its events, gauges and schema guard."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest
from prometheus_client import REGISTRY

from imexdra.api.computedomain import ComputeDomain, ComputeDomainNode, ComputeDomainStatus, Condition
from imexdra.api.computedomainclique import ComputeDomainClique, ComputeDomainDaemonInfo
from imexdra.api.constants import ComputeDomainStatusValue, ConditionStatus
from imexdra.api.imexpeers import IMEX_PEERS_ANNOTATION, ImexPeers, PeerLink, encode_annotation
from imexdra.controller.daemons import DaemonPod, daemon_pod
from imexdra.controller.imexhealth import ImexHealth, only_reports_differ, peers_condition
from imexdra.controller.metrics import DomainStatusMetrics
from imexdra.controller.sync import MembershipSync
from tests.unit.controller.support import UID, Events, make_config, make_domain, make_pod, member
from tests.unit.controller.syncfakes import Caches, Clock, Writer

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
OK2 = ImexPeers(connected=2, expected=2)


def lost(*names: str, state: str = "R") -> ImexPeers:
    links = [PeerLink(node_name=n, state=state) for n in names]
    return ImexPeers(connected=2 - len(links), expected=2, not_connected=links)


def node(name: str, peers: ImexPeers | None, *, clique: str = "c.1") -> ComputeDomainNode:
    entry = ComputeDomainNode(name=name, ip_address="10.0.0.1", clique_id=clique, index=0)
    return entry if peers is None else msgspec.structs.replace(entry, imex_peers=peers)


@pytest.mark.parametrize(
    ("nodes", "expected"),
    [
        ([node("a", None), node("b", None)], None),
        ([node("a", OK2), node("b", OK2), node("c", OK2)], (ConditionStatus.TRUE, "AllPeersConnected")),
        ([node("a", OK2), node("b", None)], (ConditionStatus.UNKNOWN, "NotAllReported")),
        (
            [node("a", lost("c")), node("b", None), node("c", OK2)],
            (ConditionStatus.FALSE, "PeersNotConnected"),
        ),
        # A peer no longer in the clique (or in another one) does not count against the domain.
        ([node("a", lost("gone")), node("b", OK2)], (ConditionStatus.TRUE, "AllPeersConnected")),
        ([node("a", lost("x")), node("x", OK2, clique="c.2")], (ConditionStatus.TRUE, "AllPeersConnected")),
        # A node without a fabric is not an IMEX peer.
        ([node("a", OK2), node("z", None, clique="")], (ConditionStatus.TRUE, "AllPeersConnected")),
    ],
    ids=[
        "no-reports",
        "all-connected",
        "one-silent",
        "one-lost",
        "departed-peer",
        "other-clique",
        "non-fabric",
    ],
)
def test_condition_from_reports(nodes: list[ComputeDomainNode], expected: tuple[str, str] | None) -> None:
    """False names broken pairs, True needs every fabric node's report, none before any report."""
    condition = peers_condition(None, nodes, now=NOW, generation=1)
    assert (None if condition is None else (condition.status, condition.reason)) == expected


def test_false_message_names_pairs_and_states() -> None:
    """The message says which node cannot reach which, with IMEX's state in words."""
    nodes = [node("a", lost("c")), node("b", lost("c", state="!M!")), node("c", OK2)]
    condition = peers_condition(None, nodes, now=NOW, generation=1)
    assert condition is not None
    assert condition.message == (
        "a cannot reach c (R: recovering: connection lost, clean-up not yet triggered); "
        "b cannot reach c (!M!: node map mismatch)"
    )


def test_transition_time_moves_only_with_the_status() -> None:
    """Same status: the old transition time stays; another status: now."""
    earlier = NOW - timedelta(hours=1)
    old = Condition(
        type="IMEXPeersConnected",
        status=ConditionStatus.TRUE,
        last_transition_time=earlier,
        reason="AllPeersConnected",
        message="m",
    )
    same = peers_condition(old, [node("a", OK2)], now=NOW, generation=1)
    assert same is not None and same.last_transition_time == earlier
    flipped = peers_condition(old, [node("a", lost("b")), node("b", OK2)], now=NOW, generation=1)
    assert flipped is not None and flipped.last_transition_time == NOW
    silent = peers_condition(old, [node("a", None)], now=NOW, generation=1)
    assert silent is not None and silent.status == ConditionStatus.UNKNOWN


def test_daemon_pod_reads_the_annotation() -> None:
    """The pod's annotation becomes the member's report; a malformed one is ignored."""
    pod = make_pod()
    assert pod.metadata is not None
    pod.metadata.annotations = {IMEX_PEERS_ANNOTATION: encode_annotation(lost("b"))}
    read = daemon_pod(pod)
    assert read is not None and read.imex_peers == lost("b")
    pod.metadata.annotations = {IMEX_PEERS_ANNOTATION: '{"connected": -1}'}
    read = daemon_pod(pod)
    assert read is not None and read.imex_peers is None


class PruningWriter(Writer):
    """The writer of a cluster with upstream's CRDs: what it stores has no IMEX health fields."""

    @staticmethod
    def _prune(daemons: list[Any]) -> list[Any]:
        return [msgspec.structs.replace(d, imex_peers=msgspec.UNSET) for d in daemons]

    async def create(self, obj: ComputeDomainClique, view: Any) -> ComputeDomainClique:
        return await super().create(msgspec.structs.replace(obj, daemons=self._prune(obj.daemons)), view)

    async def merge_patch(
        self, obj: ComputeDomainClique, patch: dict[str, Any], view: Any
    ) -> ComputeDomainClique:
        patched = await super().merge_patch(obj, patch, view)
        pruned = msgspec.structs.replace(patched, daemons=self._prune(patched.daemons))
        objects = self.caches.clique_view.objects
        objects[objects.index(patched)] = pruned
        return pruned

    async def write_status(
        self, cd: ComputeDomain, status: ComputeDomainStatus, view: Any, **kw: Any
    ) -> ComputeDomain:
        kept = [c for c in status.conditions if c.type != "IMEXPeersConnected"]
        status = msgspec.structs.replace(status, nodes=self._prune(status.nodes), conditions=kept)
        await super().write_status(cd, status, view, **kw)
        return self.domain


@dataclass
class Rig:
    writer: Writer
    caches: Caches = field(default_factory=Caches)
    clock: Clock = field(default_factory=Clock)
    events: Events = field(default_factory=Events)

    def __post_init__(self) -> None:
        config = make_config()
        self.config = config
        self.sync = MembershipSync(
            config,
            self.caches,  # type: ignore[arg-type]
            self.writer,  # type: ignore[arg-type]
            events=self.events,  # type: ignore[arg-type]
            metrics=DomainStatusMetrics(),
            clock=self.clock,
            now=lambda: NOW,
        )

    async def step(self) -> list[str]:
        """Passes until nothing is due; the writes they made."""
        writes: list[str] = []
        for _ in range(10):
            self.writer.log.clear()
            delay = await self.sync.sync(self.writer.domain)
            writes += self.writer.log
            if delay is None:
                return writes
            self.clock.now += delay
        raise AssertionError("the sync never settled")

    def condition(self) -> Condition | None:
        status = self.writer.domain.status
        return status.condition("IMEXPeersConnected") if status else None


def make_rig(writer_type: type[Writer] = Writer) -> Rig:
    domain = make_domain()
    assert domain.metadata is not None and domain.spec is not None
    domain.metadata.uid = UID
    caches = Caches()
    return Rig(writer_type(caches, domain), caches)


def reporting(name: str, peers: ImexPeers | None) -> DaemonPod:
    return dataclasses.replace(member(name), imex_peers=peers)


def gauge(name: str, node_name: str) -> float | None:
    labels = {"namespace": "team-a", "compute_domain": "cd", "node": node_name}
    return REGISTRY.get_sample_value(name, labels)


async def test_reports_reach_clique_status_condition_events_and_gauges() -> None:
    """A lost peer shows in the entries, turns the condition False with one Warning, and clears."""
    rig = make_rig()
    rig.caches.pods = [reporting("a", OK2), reporting("b", OK2), reporting("c", OK2)]
    await rig.step()
    (clique,) = rig.caches.clique_view.objects
    assert {d.node_name: d.imex_peers for d in clique.daemons} == {"a": OK2, "b": OK2, "c": OK2}
    condition = rig.condition()
    assert condition is not None and condition.status == ConditionStatus.TRUE
    assert rig.events.recorded == []
    assert (gauge("imexdra_imex_peers_connected", "a"), gauge("imexdra_imex_peers_expected", "a")) == (2, 2)

    rig.clock.now += 10
    rig.caches.pods = [reporting("a", lost("c")), reporting("b", lost("c")), reporting("c", OK2)]
    assert sorted(await rig.step()) == ["clique", "status"]
    condition = rig.condition()
    assert condition is not None and condition.status == ConditionStatus.FALSE
    assert rig.events.typed() == [("Warning", "IMEXPeersNotConnected")]
    note = rig.events.recorded[0].note
    assert "a cannot reach c" in note and "b cannot reach c" in note
    assert gauge("imexdra_imex_peers_connected", "a") == 1
    status = rig.writer.domain.status
    assert status is not None and {n.name: n.imex_peers for n in status.nodes}["b"] == lost("c")

    rig.clock.now += 10
    assert await rig.step() == []  # nothing changed: nothing written, no new event
    assert len(rig.events.recorded) == 1

    rig.clock.now += 10
    rig.caches.pods = [reporting("a", OK2), reporting("b", OK2), reporting("c", OK2)]
    await rig.step()
    condition = rig.condition()
    assert condition is not None and condition.status == ConditionStatus.TRUE
    assert rig.events.typed()[-1] == ("Normal", "IMEXPeersConnected")

    rig.caches.pods = [reporting("a", OK2), reporting("b", None), reporting("c", OK2)]
    rig.clock.now += 10
    await rig.step()
    assert gauge("imexdra_imex_peers_connected", "b") is None  # silent now: its series is gone
    rig.sync.forget(UID)
    assert gauge("imexdra_imex_peers_connected", "a") is None


async def test_domain_without_reports_keeps_upstreams_status() -> None:
    """Daemons that report nothing: no imexPeers, no condition."""
    rig = make_rig()
    rig.caches.pods = [member("a"), member("b")]
    await rig.step()
    status = rig.writer.domain.status
    assert status is not None and status.conditions == []
    assert b"imexPeers" not in msgspec.json.encode(status)


async def test_pruned_fields_stop_publishing_instead_of_rewriting() -> None:
    """On upstream's CRDs the first write loses the fields; later passes write nothing more."""
    rig = make_rig(PruningWriter)
    rig.caches.pods = [reporting("a", OK2), reporting("b", lost("a"))]
    assert sorted(await rig.step()) == ["clique", "status"]
    for _ in range(3):
        rig.clock.now += 10
        assert await rig.step() == []
    rig.clock.now += 10
    rig.caches.pods = [reporting("a", lost("b")), reporting("b", OK2)]
    assert await rig.step() == []
    assert rig.condition() is None


def test_health_members_drop_reports_once_guarded() -> None:
    """After the guard tripped the members are published without their reports."""
    health = ImexHealth(Events())  # type: ignore[arg-type]
    members = [reporting("a", OK2)]
    assert health.members(members) == members
    health.guard.check("x", sent=True, stored=False)
    assert [m.imex_peers for m in health.members(members)] == [None]


def three_of(peers: ImexPeers) -> ImexPeers:
    """``peers`` as a member of a four-node clique reports it."""
    return msgspec.structs.replace(peers, expected=3, connected=peers.connected + 1)


async def test_reports_of_many_daemons_are_gathered_into_one_publication() -> None:
    """After one report is published, the others wait a report spacing and go out together.

    A lost node is reported by every survivor, each on its own poll; publishing each report alone would
    cost the clique and the status one write per survivor (docs/imex-health.md §3). A change daemons
    act on (a member NotReady) is not held back by the spacing.
    """
    rig = make_rig()
    ok3 = three_of(OK2)
    rig.caches.pods = [reporting(n, ok3) for n in "abcd"]
    await rig.step()
    rig.clock.now += 60
    spacing = rig.config.daemon_imex_peers_poll_interval * 3

    rig.caches.pods[0] = reporting("a", three_of(lost("d")))
    assert sorted(await rig.step()) == ["clique", "status"]  # the first report: at once
    published_at = rig.clock.now
    rig.clock.now += 2
    rig.caches.pods[1] = reporting("b", three_of(lost("d")))
    rig.writer.log.clear()
    assert await rig.sync.sync(rig.writer.domain) == pytest.approx(spacing - 2)
    rig.clock.now += 3
    rig.caches.pods[2] = reporting("c", three_of(lost("d")))
    assert await rig.sync.sync(rig.writer.domain) == pytest.approx(spacing - 5)
    assert rig.writer.log == []
    assert sorted(await rig.step()) == ["clique", "status"]  # b's and c's reports in one publication
    assert rig.clock.now == pytest.approx(published_at + spacing)
    condition = rig.condition()
    assert condition is not None and all(f"{n} cannot reach d" in condition.message for n in "abc")

    rig.clock.now += 1
    rig.caches.pods[3] = dataclasses.replace(reporting("d", ok3), ready=False)
    rig.writer.log.clear()
    delay = await rig.sync.sync(rig.writer.domain)
    assert delay is None and sorted(rig.writer.log) == ["clique", "status"]
    status = rig.writer.domain.status
    assert status is not None and status.status.value == "NotReady"


def test_only_reports_differ_needs_a_report_change_and_nothing_else() -> None:
    """Reports alone may wait; a status change, a new member or no change at all may not."""
    published = {"c.1": [member_entry("a", OK2)]}
    current = ComputeDomainStatus(status=ComputeDomainStatusValue.READY, nodes=[node("a", OK2)])
    reported = {"c.1": [member_entry("a", lost("b"))]}
    wanted = ComputeDomainStatus(status=ComputeDomainStatusValue.READY, nodes=[node("a", lost("b"))])
    assert only_reports_differ(published, reported, current, wanted)
    assert not only_reports_differ(published, published, current, current)  # nothing differs (owners only)
    not_ready = msgspec.structs.replace(wanted, status=ComputeDomainStatusValue.NOT_READY)
    assert not only_reports_differ(published, reported, current, not_ready)
    joined = {"c.1": [member_entry("a", lost("b")), member_entry("b", None)]}
    assert not only_reports_differ(published, joined, current, wanted)
    assert not only_reports_differ(published, reported, None, wanted)


def member_entry(name: str, peers: ImexPeers | None) -> ComputeDomainDaemonInfo:
    entry = ComputeDomainDaemonInfo(node_name=name, ip_address="10.0.0.1", clique_id="c.1", index=0)
    return entry if peers is None else msgspec.structs.replace(entry, imex_peers=peers)
