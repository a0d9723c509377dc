"""Restart safety and leader election of the real controller binary on the real control plane.

Aspects covered: SIGKILL at random points while domains are being created, and again while they are
being deleted, with a restart after each kill: every domain converges (Ready with exactly its objects,
then gone) and nothing labelled for any of them is left — driver-managed, and host-managed under
channel isolation, where the kills land mid-allocation too: no two domains ever record one channel, and
each round gets channels 1..10 again, so no number leaked (docs/channel-isolation.md §4); two replicas
elect exactly one leader through the Lease, a standby takes over after the leader is SIGKILLed, and a
SIGTERMed leader releases the Lease. The random delays come from a seeded generator; the seed is in
every failure message.
"""

from __future__ import annotations

import asyncio
import functools
import os
import random
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from imexdra.api.computedomain import ComputeDomain
from imexdra.api.flags.common import ImexIsolation
from imexdra.common.kube.kubeclient import KubeClient
from imexdra.common.kube.models.coordination_v1 import Lease
from imexdra_sim.builders import compute_domain_model
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.integration.controller_harness import (
    ControllerUnderTest,
    install_controller_identity,
    install_driver_namespace,
    leftovers,
)
from tests.support.kubectl import get_json
from tests.support.session import progress
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

SUFFIX = secrets.token_hex(3)
DRIVER_NS = f"imexdra-res-{SUFFIX}"
USER_NS = f"cd-res-{SUFFIX}"
DOMAINS = 10
#: Create/delete rounds, each with SIGKILLs mid-create and mid-delete (``make soak`` runs more).
ROUNDS = int(os.environ.get("IMEXDRA_CONTROLLER_KILL_ROUNDS", "1"))
LEASE = "imexdra-controller-test"
LABEL = "resource.nvidia.com/computeDomain"
ELECTION_ARGS = (
    "--leader-election-enabled",
    f"--leader-election-lease-lock-namespace={DRIVER_NS}",
    f"--leader-election-lease-lock-name={LEASE}",
    "--leader-election-lease-duration=4s",
    "--leader-election-renew-deadline=3s",
    "--leader-election-retry-period=1s",
)


@pytest.fixture(scope="module")
async def identity(cluster: LocalCluster, compute_domain_crds: None) -> AsyncIterator[Path]:
    """Namespaces and the controller's kubeconfig; every domain left is deleted through a controller."""
    install_driver_namespace(cluster, DRIVER_NS)
    cluster.create_namespace(USER_NS)
    kubeconfig = install_controller_identity(cluster, DRIVER_NS)
    yield kubeconfig
    cleaner = ControllerUnderTest(
        cluster, kubeconfig, DRIVER_NS, name=f"controller-res-cleanup-{SUFFIX}"
    ).start()
    cluster.kubectl("delete", "computedomains", "--all", "-n", USER_NS, "--timeout=90s", check=False)
    cleaner.stop()
    cluster.kubectl("delete", "namespace", USER_NS, DRIVER_NS, "--wait=false")


def domains(cluster: LocalCluster) -> dict[str, Any]:
    return {i["metadata"]["name"]: i for i in get_json(cluster, "computedomains", "-n", USER_NS)["items"]}


@dataclass(frozen=True)
class Mode:
    """How the controller runs in one parametrization, and what a converged domain then owns."""

    gates: str
    isolation: ImexIsolation
    #: Labelled objects per domain (templates and DaemonSet).
    owned: int

    @property
    def args(self) -> tuple[str, ...]:
        return (f"--imex-isolation={self.isolation.value}",)

    @property
    def channel_isolation(self) -> bool:
        return self.isolation is ImexIsolation.CHANNEL


MODES = {
    "driver-managed": Mode(gates="", isolation=ImexIsolation.DOMAIN, owned=3),
    "channel-isolation": Mode(gates="HostManagedIMEX=true", isolation=ImexIsolation.CHANNEL, owned=1),
}


def converged(cluster: LocalCluster, names: list[str], mode: Mode) -> bool:
    """Every domain Ready with its finalizer and exactly its objects (and, under channel isolation, a
    channel of its own)."""
    found = domains(cluster)
    for name in names:
        item = found.get(name)
        if item is None or item.get("status", {}).get("status") != "Ready":
            return False
        if mode.channel_isolation and not isinstance(item["status"].get("channel"), int):
            return False
        uid = item["metadata"]["uid"]
        daemon = [] if mode.channel_isolation else [f"computedomain-daemon-{uid}"]
        expected = {
            "resourceclaimtemplates": sorted([f"{name}-channel", *daemon]),
            "daemonsets": daemon,
            "computedomaincliques": [],
            "nodes": [],
        }
        if {k: sorted(v) for k, v in leftovers(cluster, uid).items()} != expected:
            return False
    return True


def foreign_domains(cluster: LocalCluster) -> list[str]:
    """``namespace/name`` of every ComputeDomain outside this module's namespace."""
    items = get_json(cluster, "computedomains", "-A")["items"]
    return [
        f"{i['metadata']['namespace']}/{i['metadata']['name']}"
        for i in items
        if i["metadata"]["namespace"] != USER_NS
    ]


def recorded_channels(cluster: LocalCluster) -> list[int]:
    """Every live domain's ``status.channel``, duplicates kept."""
    return sorted(
        item["status"]["channel"] for item in domains(cluster).values() if "channel" in item.get("status", {})
    )


def steps_done(cluster: LocalCluster, uids: dict[str, str], mode: Mode) -> int:
    """Count the controller's visible steps for domains ``{name: uid}``: per domain, while creating, the
    finalizer, its owned objects and the status (``owned + 2``); while deleting, each owned object
    terminating or gone and the domain gone (``owned + 1``)."""
    found = domains(cluster)
    owned = [
        item
        for kind in ("resourceclaimtemplates", "daemonsets")
        for item in get_json(cluster, kind, "-A", "-l", LABEL)["items"]
        if item["metadata"]["labels"][LABEL] in uids.values()
    ]
    deleting = any("deletionTimestamp" in item["metadata"] for item in found.values())
    if not deleting and len(found) == len(uids):
        finalizers = sum(bool(item["metadata"].get("finalizers")) for item in found.values())
        statuses = sum("status" in item for item in found.values())
        return finalizers + len(owned) + statuses
    live = sum("deletionTimestamp" not in item["metadata"] for item in owned)
    return (len(uids) * mode.owned - live) + (len(uids) - len(found))


def synced_count(process: ControllerUnderTest) -> int:
    if not process.log_path.exists():
        return 0
    return sum(e.get("msg") == "Informer caches synced" for e in process.log_events())


def synced_more_than(process: ControllerUnderTest, count: int) -> bool:
    return synced_count(process) > count


async def kill_mid_work(
    process: ControllerUnderTest,
    cluster: LocalCluster,
    uids: dict[str, str],
    mode: Mode,
    total: int,
    rng: random.Random,
    seed: int,
) -> list[int]:
    """Restart and SIGKILL ``process`` shortly after its caches sync, and leave it running at the end.

    Repeats until one kill froze the work half done (some but not all of ``total`` steps done); returns
    the progress seen at each kill.
    """
    seen: list[int] = []
    window = 0.5  # adapted to this machine's speed: longer after a kill too early, shorter after one too late
    while not any(0 < done < total for done in seen):
        assert len(seen) < 10, f"seed {seed}: no kill landed mid-work: {seen}"
        synced = synced_count(process)
        process.start()
        await eventually("caches synced", functools.partial(synced_more_than, process, synced), interval=0.02)
        await asyncio.sleep(rng.uniform(0.0, window))
        process.kill()
        seen.append(steps_done(cluster, uids, mode))  # the world is frozen while no controller runs
        if mode.channel_isolation:
            channels = recorded_channels(cluster)
            assert len(channels) == len(set(channels)), f"seed {seed}: a channel recorded twice: {channels}"
        window = window * 2 if seen[-1] == 0 else window / 2
    process.start()
    return seen


@pytest.mark.parametrize("mode", MODES.values(), ids=MODES.keys())
async def test_sigkill_during_create_and_delete_converges_without_leaks(
    cluster: LocalCluster, kube: KubeClient, identity: Path, pytestconfig: pytest.Config, mode: Mode
) -> None:
    """Killed mid-create and mid-delete, a restarted controller finishes both and leaks nothing."""
    seed = int(os.environ.get("IMEXDRA_SEED") or random.randrange(1 << 30))
    rng = random.Random(seed)
    # Throttled like a default client (upstream: QPS 5; 25 here): the ~50 writes take seconds, so a kill
    # in the first half second after the caches sync lands mid-work on any machine. Unthrottled, a fast
    # machine finished every step before the first kill, and later kills had nothing left to cut.
    throttle = ("--kube-api-qps=25", "--kube-api-burst=5")
    kubeconfig = identity
    if mode.channel_isolation:
        # Numbers come from one pool for the whole cluster: a domain another module left in a namespace
        # still being deleted would take one and shift ours (it did once, run after a module that left
        # its domain to the namespace's deletion).
        await eventually(
            "no ComputeDomain of another module", lambda: not foreign_domains(cluster), within=60
        )
        kubeconfig = install_controller_identity(
            cluster, DRIVER_NS, "imexdra-controller-channels", isolation=mode.isolation
        )
    process = ControllerUnderTest(
        cluster,
        kubeconfig,
        DRIVER_NS,
        name=f"controller-kill-{mode.isolation.value}-{SUFFIX}",
        gates=mode.gates,
        extra_args=(*throttle, *mode.args),
    )
    creates, deletes = (mode.owned + 2) * DOMAINS, (mode.owned + 1) * DOMAINS
    kills = 0
    try:
        for round_ in range(ROUNDS):
            names = [f"kill-{round_}-{i}" for i in range(DOMAINS)]
            created = await asyncio.gather(*(kube.create(compute_domain_model(n, USER_NS)) for n in names))
            uids = {n: str(cd.metadata.uid) for n, cd in zip(names, created, strict=True) if cd.metadata}
            seen = await kill_mid_work(process, cluster, uids, mode, creates, rng, seed)
            progress(pytestconfig, f"seed {seed}: create steps done at each SIGKILL: {seen} of {creates}")
            await eventually(
                f"seed {seed}: all domains converged",
                functools.partial(converged, cluster, names, mode),
                within=90,
            )
            if mode.channel_isolation:  # every earlier number was released: none leaked
                assert recorded_channels(cluster) == list(range(1, DOMAINS + 1)), f"seed {seed}"
            process.kill()
            kills += len(seen) + 1
            await asyncio.gather(*(kube.delete(ComputeDomain, n, namespace=USER_NS) for n in names))
            seen = await kill_mid_work(process, cluster, uids, mode, deletes, rng, seed)
            progress(pytestconfig, f"seed {seed}: delete steps done at each SIGKILL: {seen} of {deletes}")
            await eventually(f"seed {seed}: all domains gone", lambda: not domains(cluster), within=90)
            leaked = {uid: left for uid in uids.values() if any((left := leftovers(cluster, uid)).values())}
            assert leaked == {}, f"seed {seed}"
            assert process.alive(), process.log_tail()
            process.kill()
            kills += len(seen) + 1
        progress(pytestconfig, f"seed {seed}: {kills} controller SIGKILLs survived in {ROUNDS} round(s)")
    finally:
        process.stop()


def lease_holder(cluster: LocalCluster) -> str:
    items = get_json(cluster, "leases", "-n", DRIVER_NS)["items"]
    found = [i for i in items if i["metadata"]["name"] == LEASE]
    return str(found[0]["spec"].get("holderIdentity") or "") if found else ""


async def test_two_replicas_elect_one_leader_and_fail_over(
    cluster: LocalCluster, kube: KubeClient, identity: Path
) -> None:
    """One of two replicas leads (and only it reconciles); SIGKILL hands over, SIGTERM releases the Lease."""
    replicas = [
        ControllerUnderTest(
            cluster, identity, DRIVER_NS, name=f"replica-{i}-{SUFFIX}", extra_args=ELECTION_ARGS
        )
        for i in range(2)
    ]
    try:
        for replica in replicas:
            replica.start()
        holder = await eventually("a lease holder", lambda: lease_holder(cluster), within=30)
        leader = next(r for r in replicas if holder.startswith(f"{r.name}-"))
        standby = next(r for r in replicas if r is not leader)
        assert len(holder) == len(leader.name) + 37  # "<pod name>-<uuid4>", upstream's identity
        await leader.wait_ready()
        await kube.create(compute_domain_model("led-a", USER_NS))
        await eventually(
            "led-a Ready", lambda: converged(cluster, ["led-a"], MODES["driver-managed"]), within=30
        )
        assert not standby.ready()
        assert not [e for e in standby.log_events() if e.get("msg") == "Informer caches synced"]

        leader.kill()
        new_holder = await eventually(
            "standby holds the lease", lambda: (h := lease_holder(cluster)) != holder and h, within=30
        )
        assert new_holder.startswith(f"{standby.name}-")
        await standby.wait_ready()
        await kube.create(compute_domain_model("led-b", USER_NS))
        await eventually(
            "led-b Ready", lambda: converged(cluster, ["led-a", "led-b"], MODES["driver-managed"]), within=30
        )

        assert standby.stop() == 0
        lease = await kube.get(Lease, LEASE, namespace=DRIVER_NS)
        assert lease.spec is not None and not lease.spec.holderIdentity
    finally:
        for replica in replicas:
            replica.stop()
