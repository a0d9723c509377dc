"""Crash safety of the kubelet plugin: SIGKILL at seeded random moments of prepare and unprepare.

A real kubelet prepares channel claims of two ComputeDomains (the test stands in for the controller:
claim templates, and Ready cliques or recorded channels), in two modes: driver-managed on node-0, the
domains in turn; and channel isolation on node-1 (host-managed IMEX, each domain its own channel), where
a pod of the second domain stays prepared on the node while the first domain's pods come and go, so
every kill lands next to another domain's channel. Each cycle starts a pod, SIGKILLs the plugin a
random moment later (before, during or after the kubelet's NodePrepareResources; the window adapts
so that kills keep landing around the work, and the plugin's API client is throttled so that a
prepare lasts long enough to be hit), restarts it and waits for the pod to run; then deletes the
pod, SIGKILLs the plugin again during unprepare, restarts it and waits for the pod to go. After
every step the node's invariants are checked:

- every PrepareCompleted claim has its CDI spec, and every CDI spec belongs to a claim the checkpoint
  still records as started or completed (nothing prepared is lost, nothing orphaned is left);
- no channel is prepared for two ComputeDomains at once (and under channel isolation each prepared
  channel is its domain's own number);
- driver-managed: the node carries the ComputeDomain label exactly while a claim of that domain is
  prepared.

The two modes run at the same time, each on its own node with its own plugin, domains and kill windows:
almost all of a cycle is the kubelet waiting to retry the pod after the kill (its pod workers' fixed
10 s backoff, twice a cycle), so one mode's kills land while the other's kubelet waits, and neither
mode does fewer kills or checks less than alone. (One after the other they took 159 s here.)

Size: ``IMEXDRA_PLUGIN_KILLS`` kills per mode (default 6 in CI; ``make soak`` runs >= 100). The seed is
random unless ``IMEXDRA_SEED`` is set, and is in every failure message, with the mode.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import os
import random
import re
import secrets
import signal
import uuid
from collections.abc import Iterator

import pytest

from imexdra.kubeletplugin.checkpoint.model import Checkpoint, ClaimState
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.integration.pluginharness import (
    CLIQUE,
    LABEL,
    HostImex,
    PluginProcess,
    SimulatedNode,
    create_domain,
    install_api,
    mark_daemon_ready,
    node_labels,
    plugin_kubeconfig,
    pod_claim_uid,
    pod_field,
    pod_gone,
)
from tests.support.builders import channel_pod
from tests.support.kubectl import apply
from tests.support.session import progress
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

KILLS = int(os.environ.get("IMEXDRA_PLUGIN_KILLS", "6"))
SEED = int(os.environ.get("IMEXDRA_SEED", str(secrets.randbits(32))))
ABSENT = "absent"
CLAIM_SPEC = re.compile(r"^k8s\.compute-domain\.nvidia\.com-claim_(?P<uid>[0-9a-f-]+)\.yaml$")
# Two requests a second stretch a prepare (GET claim, then label the node) over half a second, so a
# good share of the kills lands between PrepareStarted and PrepareCompleted, not only around them.
THROTTLED_CLIENT = {"KUBE_API_QPS": "2", "KUBE_API_BURST": "1"}


@dataclasses.dataclass(frozen=True)
class Mode:
    """Where and how the plugin runs in one of the two modes."""

    name: str
    node: str
    channel_isolation: bool

    @property
    def host_managed(self) -> bool:
        return self.channel_isolation  # channel isolation needs host-managed IMEX


MODES = (
    Mode(name="driver-managed", node="node-0", channel_isolation=False),
    Mode(name="channel-isolation", node="node-1", channel_isolation=True),
)


@dataclasses.dataclass
class Domain:
    """One ComputeDomain of the test: its namespace, UID and (under channel isolation) channel."""

    namespace: str
    uid: str
    channel: int | None


@contextlib.contextmanager
def running_plugin(cluster: LocalCluster, mode: Mode) -> Iterator[PluginProcess]:
    """The plugin on the mode's node (which has an NVLink clique; host-managed: and a host IMEX)."""
    node = cluster.node(mode.node)
    sim = SimulatedNode(node, CLIQUE)
    env = {**THROTTLED_CLIENT, "IMEX_ISOLATION": "channel" if mode.channel_isolation else "domain"}
    kubeconfig = plugin_kubeconfig(cluster, node, host_managed=mode.host_managed)
    process = PluginProcess(sim, kubeconfig, host_managed=mode.host_managed, extra_env=env)
    host_imex = HostImex(sim) if mode.host_managed else None
    if host_imex is not None:
        host_imex.start()
    process.start()
    try:
        yield process
    finally:
        if process.process is not None:
            process.stop()
        if host_imex is not None:
            host_imex.stop()


@pytest.fixture(scope="module")
def plugins(cluster: LocalCluster) -> Iterator[dict[Mode, PluginProcess]]:
    """Each mode's plugin, running on its node."""
    install_api(cluster)
    with contextlib.ExitStack() as stack:
        yield {mode: stack.enter_context(running_plugin(cluster, mode)) for mode in MODES}


@pytest.fixture
def domains(cluster: LocalCluster) -> Iterator[dict[Mode, list[Domain]]]:
    """Per mode, two namespaces, each with a ComputeDomain ``train``: its daemon on the node Ready
    (driver-managed) or channels 1 and 2 recorded (channel isolation)."""
    created: dict[Mode, list[Domain]] = {}
    for mode in MODES:
        created[mode] = []
        for index in range(2):
            namespace = f"kp-crash-{uuid.uuid4().hex[:6]}"
            cluster.create_namespace(namespace)
            channel = index + 1 if mode.channel_isolation else None
            domain_uid = create_domain(cluster, namespace, channel=channel)
            if not mode.channel_isolation:
                mark_daemon_ready(cluster, domain_uid, mode.node)
            created[mode].append(Domain(namespace, domain_uid, channel))
    yield created
    # Wait until they are gone (the plugins still run to unprepare their pods): a domain recording a
    # channel left in the API makes a later module's domain-isolation controller hold new domains
    # back (IsolationSwitchPending, docs/channel-isolation.md §7).
    namespaces = [domain.namespace for mode_domains in created.values() for domain in mode_domains]
    cluster.kubectl("delete", "namespace", *namespaces, "--timeout=150s", check=False, timeout=180)


def invariant_violations(cluster: LocalCluster, sim: SimulatedNode, domains: list[Domain]) -> list[str]:
    """What is wrong with the node's checkpoint, CDI specs and label right now (empty: nothing)."""
    checkpoint: Checkpoint = sim.checkpoint()
    live = {
        uid
        for uid, claim in checkpoint.claims.items()
        if claim.state in (ClaimState.PREPARE_STARTED, ClaimState.PREPARE_COMPLETED)
    }
    completed = {u for u, c in checkpoint.claims.items() if c.state == ClaimState.PREPARE_COMPLETED}
    specs = {m["uid"] for p in sim.cdi_root.iterdir() if (m := CLAIM_SPEC.match(p.name))}
    problems = [f"prepared claim {uid} has no CDI spec" for uid in sorted(completed - specs)]
    problems += [f"CDI spec of claim {uid} is not in the checkpoint" for uid in sorted(specs - live)]
    domains_by_channel: dict[str, set[str]] = collections.defaultdict(set)
    own_channel = {domain.uid: domain.channel for domain in domains}
    for uid in completed:
        for group in checkpoint.claims[uid].prepared_devices:
            for device in group.devices:
                owner = group.config_state.compute_domain
                domains_by_channel[device.device.device_name].add(owner)
                if own_channel.get(owner) not in (None, device.id):
                    problems.append(f"claim {uid} of {owner} prepared channel {device.id}, not its own")
    problems += [
        f"channel {channel} is prepared for several domains: {sorted(domains)}"
        for channel, domains in domains_by_channel.items()
        if len(domains) > 1
    ]
    if any(domain.channel is not None for domain in domains):
        return problems  # host-managed: the plugin labels no node
    prepared_domains = set().union(*domains_by_channel.values()) if domains_by_channel else set()
    label = node_labels(cluster, sim.node.name).get(LABEL)
    if prepared_domains and label not in prepared_domains:
        problems.append(f"node label {label!r} while claims of {sorted(prepared_domains)} are prepared")
    return problems


async def converged(
    cluster: LocalCluster, sim: SimulatedNode, domains: list[Domain], what: str, mode: Mode
) -> None:
    """Wait until no invariant is violated (a restarted plugin may still be finishing its work)."""
    last: list[str] = []

    def clean() -> bool:
        last[:] = invariant_violations(cluster, sim, domains)
        return not last

    try:
        await eventually(f"invariants after {what}", clean, within=60)
    except BaseException:
        pytest.fail(f"seed {SEED}, {mode.name}: invariants violated after {what}: {last}")


def claim_state(sim: SimulatedNode, claim_uid: str | None) -> str:
    """The checkpoint state of ``claim_uid`` right now, or ``absent``."""
    entry = sim.checkpoint().claims.get(claim_uid or "")
    return str(entry.state) if entry else ABSENT


@dataclasses.dataclass
class KillWindow:
    """How long after a pod change the next kill may come: a random moment within ``seconds``.

    It adapts to this machine's speed like a binary search: a kill that came before the plugin
    started its work doubles the window, one that came after the work was done halves it, so the
    kills keep landing around and inside the plugin's prepare or unprepare.
    """

    seconds: float = 1.0

    async def kill_and_restart(self, plugin: PluginProcess, rng: random.Random) -> None:
        """SIGKILL the plugin a random moment from now and start it again at once."""
        await asyncio.sleep(rng.uniform(0, self.seconds))
        plugin.stop(signal.SIGKILL)
        plugin.start()

    def landed(self, *, early: bool, late: bool) -> None:
        """Adapt to where the last kill landed."""
        if early:
            self.seconds = min(self.seconds * 2, 4.0)
        elif late:
            self.seconds = max(self.seconds / 2, 0.05)


async def test_plugin_survives_sigkill_during_prepare_and_unprepare(
    cluster: LocalCluster,
    plugins: dict[Mode, PluginProcess],
    domains: dict[Mode, list[Domain]],
    pytestconfig: pytest.Config,
) -> None:
    """In both modes at once: after every kill the pod reaches its goal and the node's invariants hold."""
    async with asyncio.TaskGroup() as modes:
        for mode in MODES:
            modes.create_task(survive_kills(cluster, plugins[mode], mode, domains[mode], pytestconfig))


async def survive_kills(
    cluster: LocalCluster,
    plugin: PluginProcess,
    mode: Mode,
    domains: list[Domain],
    pytestconfig: pytest.Config,
) -> None:
    """``KILLS`` kills of one mode's plugin, half during prepare and half during unprepare."""
    rng = random.Random(SEED)
    await plugin.wait_registered()
    states: collections.Counter[str] = collections.Counter()
    windows = {"create": KillWindow(), "delete": KillWindow()}
    cycling = domains
    if mode.channel_isolation:  # the second domain's pod stays on the node throughout
        resident = domains[1]
        apply(cluster, channel_pod("resident", resident.namespace, "train-channel", node=mode.node))
        await eventually(
            f"{mode.name}: the resident pod Running",
            lambda: pod_field(cluster, resident.namespace, "resident", "{.status.phase}") == "Running",
            within=180,
        )
        cycling = domains[:1]
    cycle = 0
    while 2 * cycle < KILLS:
        domain = cycling[cycle % len(cycling)]
        await one_cycle(cluster, plugin, mode, rng, windows, states, domains, domain, f"worker-{cycle}")
        cycle += 1
        progress(pytestconfig, f"plugin crash seed {SEED}, {mode.name}: {2 * cycle}/{KILLS} kills survived")
    seen = dict(sorted(states.items()))
    progress(pytestconfig, f"plugin crash seed {SEED}, {mode.name}: claim state at each kill: {seen}")


async def one_cycle(
    cluster: LocalCluster,
    plugin: PluginProcess,
    mode: Mode,
    rng: random.Random,
    windows: dict[str, KillWindow],
    states: collections.Counter[str],
    domains: list[Domain],
    domain: Domain,
    pod: str,
) -> None:
    """Start ``pod`` with a kill, check; delete it with a kill, check."""
    namespace, node = domain.namespace, plugin.sim.node.name
    labelled = domain.channel is None  # driver-managed: the plugin labels the node for the domain
    apply(cluster, channel_pod(pod, namespace, "train-channel", node=node))
    await windows["create"].kill_and_restart(plugin, rng)
    state = claim_state(plugin.sim, _claim_uid_or_none(cluster, namespace, pod))
    windows["create"].landed(early=state == ABSENT, late=state == ClaimState.PREPARE_COMPLETED)
    states[f"create:{state}"] += 1
    await eventually(
        f"seed {SEED}, {mode.name}: {pod} Running after a kill",
        lambda: pod_field(cluster, namespace, pod, "{.status.phase}") == "Running",
        within=180,
    )
    claim_uid = pod_claim_uid(cluster, namespace, pod)
    await converged(cluster, plugin.sim, domains, f"prepare of {pod}", mode)
    assert plugin.sim.checkpoint().claims[claim_uid].state == ClaimState.PREPARE_COMPLETED, mode.name
    if labelled:
        assert node_labels(cluster, node).get(LABEL) == domain.uid, mode.name

    cluster.kubectl("delete", "pod", pod, "-n", namespace, "--wait=false")
    await windows["delete"].kill_and_restart(plugin, rng)
    state = claim_state(plugin.sim, claim_uid)
    windows["delete"].landed(
        early=state == ClaimState.PREPARE_COMPLETED, late=state != ClaimState.PREPARE_COMPLETED
    )
    states[f"delete:{state}"] += 1
    await eventually(
        f"seed {SEED}, {mode.name}: {pod} gone after a kill",
        lambda: pod_gone(cluster, namespace, pod),
        within=180,
    )
    await converged(cluster, plugin.sim, domains, f"unprepare of {pod}", mode)
    assert claim_state(plugin.sim, claim_uid) in (ABSENT, ClaimState.PREPARE_ABORTED), mode.name
    assert not plugin.sim.claim_spec(claim_uid).exists(), mode.name
    if labelled:
        await eventually(f"{mode.name}: node label removed", lambda: LABEL not in node_labels(cluster, node))


def _claim_uid_or_none(cluster: LocalCluster, namespace: str, pod: str) -> str | None:
    claim_name = pod_field(cluster, namespace, pod, "{.status.resourceClaimStatuses[0].resourceClaimName}")
    if not claim_name:
        return None
    return pod_claim_uid(cluster, namespace, pod) or None
