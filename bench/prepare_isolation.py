"""Prepare under HostManagedIMEX: channel isolation against domain isolation (issue 17's prepare figure).

Under ``--imex-isolation=channel`` a channel prepare does what domain isolation's does (GET the claim,
look its ComputeDomain up in the plugin's cache, ask the host's nvidia-imex for ``READY``, write the
checkpoint and the claim's CDI spec) plus the channel check (docs/channel-isolation.md §6): the
domain's ``status.channel`` from the same cache lookup, and a scan of the checkpoint for a claim of
another domain holding the same channel (``applyconfig.assert_channel_free_for``, which reads each
holder's recorded allocation and opaque config back). Domain isolation's scan is
``assert_channel_not_allocated`` (channel 0 held by any prepared claim).

``isolation_phase`` runs the real plugin host-managed, with its host IMEX (``benchlib.HostImex``),
once per isolation, and prepares then unprepares ``--isolation-claims`` claims one at a time over the
gRPC socket, as ``prepare_bench`` does driver-managed (paced to the plugin's client rate limit: one
API request per cycle here). Domain isolation: a domain and claims allocated ``channel-0``. Channel
isolation: a domain whose status records channel ``CHANNEL`` and claims allocated ``channel-<CHANNEL>``;
then again with ``--held-claims`` claims of other domains held prepared on the node, each domain with
its own channel (``CHANNEL`` + 1 and up), as on a node shared by many domains' pods: the scan reads
every held entry's recorded allocation back. Domain isolation cannot hold more than one channel claim
prepared on a node (channel 0 is the node's one channel device), so it has no such case.

Both isolations include the host IMEX check, which runs the driver root's ``nvidia-imex-ctl -q``: the
sim's fake is a Python program (tens to hundreds of ms a run here, where the native tool takes a few
ms), so the end-to-end difference between the two is small next to that run's variance. The checks
themselves are therefore also timed in this process: the two checkpoint scans on the plugin's own
checkpoint file with one and with ``--held-claims`` prepared claims (``scan_costs``), and the domain
lookup on a ``ComputeDomainCache`` synced from the API (``lookup_cost``; the same call in both
isolations).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from benchlib import (
    DRIVER,
    PLUGIN_BIN,
    DraStub,
    HostImex,
    simulated_node,
    wait_for_socket,
)
from stats import percentile

from imexdra.common.kube.connection import connect
from imexdra.dra._pb import dra_v1_pb2 as dra
from imexdra.kubeletplugin.checkpoint.model import Checkpoint, unmarshal
from imexdra.kubeletplugin.configs.apply import assert_channel_free_for, assert_channel_not_allocated
from imexdra.kubeletplugin.domains import ComputeDomainCache
from imexdra_sim.builders import channel_claim, channel_config, compute_domain
from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.localcluster.processes import free_port

MERGE = "application/merge-patch+json"

#: The channel the channel-isolated domain records (any number from 1 up).
CHANNEL = 7
#: Repetitions of each in-process check timing.
CHECK_REPEATS = 2000
NODE_ADDRESS = "127.101.0.1"


def stats_ms(samples: list[float]) -> dict[str, float]:
    """p50/p90/p99/max of latencies in ms."""
    return {
        "p50": round(percentile(samples, 0.5), 2),
        "p90": round(percentile(samples, 0.9), 2),
        "p99": round(percentile(samples, 0.99), 2),
        "max": round(max(samples), 2),
    }


async def allocate_claims(
    cluster: LocalCluster, namespace: str, node: str, specs: list[tuple[str, int]], *, prefix: str
) -> list[tuple[str, str]]:
    """One ResourceClaim per (domain UID, n) allocated ``channel-<n>`` on ``node``; (name, uid) pairs."""
    http = connect(cluster.kubeconfig).transport(user_agent="prepare-bench")  # raw: models add nothing
    base = f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"
    limit = asyncio.Semaphore(16)
    selector = {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
    }

    async def one(index: int, domain_uid: str, channel: int) -> tuple[str, str]:
        name = f"{prefix}-{index:05d}"
        body = channel_claim(None, name, domain_uid)  # namespaced by the URL
        device = f"channel-{channel}"
        allocation = {
            "devices": {
                "results": [{"request": "channel", "driver": DRIVER, "pool": node, "device": device}],
                "config": [{"source": "FromClaim", **channel_config(domain_uid)}],
            },
            "nodeSelector": selector,
        }
        async with limit:
            created = json.loads((await http.request("POST", base, body=body)).body)
            patch = {"status": {"allocation": allocation}}
            await http.request("PATCH", f"{base}/{name}/status", body=patch, content_type=MERGE)
        return name, str(created["metadata"]["uid"])

    try:
        return list(await asyncio.gather(*(one(i, uid, n) for i, (uid, n) in enumerate(specs))))
    finally:
        http.close()


async def create_domains(
    cluster: LocalCluster, namespace: str, names_and_channels: list[tuple[str, int | None]]
) -> list[str]:
    """Ready ComputeDomains, with ``status.channel`` where a number is given; their UIDs.

    The status is what the controller records; the plugin checks the channel against it.
    """
    http = connect(cluster.kubeconfig).transport(user_agent="prepare-bench")
    base = f"/apis/resource.nvidia.com/v1beta1/namespaces/{namespace}/computedomains"
    limit = asyncio.Semaphore(16)

    async def one(name: str, channel: int | None) -> str:
        status: dict[str, Any] = {"status": "Ready", "nodes": []}
        if channel is not None:
            status["channel"] = channel
        async with limit:
            body = compute_domain(name, None, num_nodes=1)
            created = json.loads((await http.request("POST", base, body=body)).body)
            await http.request("PATCH", f"{base}/{name}/status", body={"status": status}, content_type=MERGE)
        return str(created["metadata"]["uid"])

    try:
        return list(await asyncio.gather(*(one(name, channel) for name, channel in names_and_channels)))
    finally:
        http.close()


async def prepare(stub: DraStub, namespace: str, claim: tuple[str, str], channel: int) -> float:
    """NodePrepareResources of one claim; its latency in ms. Fails unless the one device is ``channel``."""
    name, uid = claim
    request = [dra.Claim(namespace=namespace, name=name, uid=uid)]
    started = time.perf_counter()
    answer = await stub.NodePrepareResources(dra.NodePrepareResourcesRequest(claims=request), timeout=60)
    elapsed = (time.perf_counter() - started) * 1e3
    result = answer.claims[uid]
    expected = [f"k8s.compute-domain.nvidia.com/claim={uid}-channel-{channel}"]
    if result.error or list(result.devices[0].cdi_device_ids) != expected:
        raise RuntimeError(f"unexpected prepare result for {name}: {result}")
    return elapsed


async def unprepare(stub: DraStub, namespace: str, claim: tuple[str, str]) -> float:
    """NodeUnprepareResources of one claim; its latency in ms."""
    name, uid = claim
    request = [dra.Claim(namespace=namespace, name=name, uid=uid)]
    started = time.perf_counter()
    answer = await stub.NodeUnprepareResources(dra.NodeUnprepareResourcesRequest(claims=request), timeout=60)
    elapsed = (time.perf_counter() - started) * 1e3
    if answer.claims[uid].error:
        raise RuntimeError(f"unexpected unprepare result for {name}: {answer.claims[uid].error}")
    return elapsed


async def cycle(
    stub: DraStub,
    namespace: str,
    claims: list[tuple[str, str]],
    channel: int,
    interval: float,
) -> list[float]:
    """Prepare then unprepare each claim, one cycle per ``interval`` seconds; prepare latencies in ms."""
    samples = []
    for claim in claims:
        started = time.monotonic()
        samples.append(await prepare(stub, namespace, claim, channel))
        await unprepare(stub, namespace, claim)
        await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))
    return samples


def time_check(check: Callable[[], None], repeats: int = CHECK_REPEATS) -> dict[str, float]:
    """p50/p99 of ``check()`` in µs over ``repeats`` calls."""
    samples = []
    for _ in range(repeats):
        started = time.perf_counter()
        check()
        samples.append((time.perf_counter() - started) * 1e6)
    return {"p50_us": round(percentile(samples, 0.5), 1), "p99_us": round(percentile(samples, 0.99), 1)}


def scan_costs(checkpoint: Checkpoint, domain_uid: str) -> dict[str, Any]:
    """Both isolations' checkpoint scans on ``checkpoint``; neither finds a conflict (it holds one domain)."""
    return {
        "prepared_claims": len(checkpoint.claims),
        "channel_isolation_assert_channel_free_for": time_check(
            lambda: assert_channel_free_for(checkpoint, CHANNEL, domain_uid=domain_uid, claim_uid="new-claim")
        ),
        # Domain isolation's scan for channel 0, over the same entries (none holds channel 0).
        "domain_isolation_assert_channel_not_allocated": time_check(
            lambda: assert_channel_not_allocated(checkpoint, 0)
        ),
    }


async def lookup_cost(cluster: LocalCluster, domain_uid: str) -> dict[str, float]:
    """The plugin's domain lookup (``ComputeDomainCache.get``) on a cache synced from the API, in µs."""
    client = connect(cluster.kubeconfig).kube(field_manager="prepare-bench")
    cache = ComputeDomainCache(client, "bench-lookup")  # a node of its own: no status entry is its
    runner = asyncio.create_task(cache.run())
    try:
        await cache.informer.wait_for_sync()
        samples = []
        for _ in range(CHECK_REPEATS):
            started = time.perf_counter()
            found = await cache.get(domain_uid)
            samples.append((time.perf_counter() - started) * 1e6)
            if found is None or found.channel != CHANNEL:
                raise RuntimeError(f"domain {domain_uid} not in the cache with channel {CHANNEL}: {found}")
        return {"p50_us": round(percentile(samples, 0.5), 1), "p99_us": round(percentile(samples, 0.99), 1)}
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)
        client.close()


def start_plugin(env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    """The ``compute-domain-kubelet-plugin`` process with ``env``, its output in ``log_path``."""
    with log_path.open("wb") as log:
        return subprocess.Popen([str(PLUGIN_BIN)], env=env, stdout=log, stderr=subprocess.STDOUT)


async def one_isolation(
    cluster: LocalCluster, base: Path, node: str, namespace: str, isolation: str, args: argparse.Namespace
) -> dict[str, Any]:
    """The plugin host-managed under ``isolation``: cycles, and for channel the held case and checks."""
    channel = CHANNEL if isolation == "channel" else 0
    (uid,) = await create_domains(
        cluster, namespace, [(f"iso-{isolation}", CHANNEL if isolation == "channel" else None)]
    )
    specs = [(uid, channel)] * args.isolation_claims
    claims = await allocate_claims(cluster, namespace, node, specs, prefix=f"{isolation}-claim")
    held: list[tuple[tuple[str, str], int]] = []
    if isolation == "channel" and args.held_claims:
        # Other domains' pods on the node, each domain with its own channel: CHANNEL+1 and up.
        numbers = [CHANNEL + 1 + i for i in range(args.held_claims)]
        uids = await create_domains(cluster, namespace, [(f"held-{n}", n) for n in numbers])
        held_claims = await allocate_claims(
            cluster, namespace, node, list(zip(uids, numbers, strict=True)), prefix="held-claim"
        )
        held = list(zip(held_claims, numbers, strict=True))
    env = {**os.environ, **simulated_node(base, node), "KUBECONFIG": str(cluster.kubeconfig)}
    env |= {
        "KUBE_API_QPS": str(args.kube_api_qps),
        "FEATURE_GATES": "HostManagedIMEX=true",
        "IMEX_MODE": "hostManaged",
        "IMEX_ISOLATION": isolation,
    }
    host_imex = HostImex(base, NODE_ADDRESS, free_port())
    host_imex.start()
    result: dict[str, Any] = {"claims": len(claims)}
    try:
        await host_imex.wait_ready()
        process = start_plugin(env, base / f"plugin-{isolation}.log")
        try:
            socket = base / "plugins" / DRIVER / "dra.sock"
            await asyncio.to_thread(wait_for_socket, socket, process)
            async with grpc.aio.insecure_channel(f"unix://{socket}") as grpc_channel:
                stub = DraStub(grpc_channel)
                # One untimed cycle: the plugin's domain cache has synced and its client warmed up.
                await cycle(stub, namespace, claims[:1], channel, args.host_interval)
                samples = await cycle(stub, namespace, claims, channel, args.host_interval)
                result["prepare_ms"] = stats_ms(samples)
                result["prepare_samples_ms"] = samples
                if held:
                    result |= await held_case(stub, base, namespace, uid, claims, held, args)
        finally:
            process.send_signal(signal.SIGTERM)
            await asyncio.to_thread(process.wait, 30)
    finally:
        host_imex.stop()
    if isolation == "channel":
        result["domain_lookup_us"] = await lookup_cost(cluster, uid)
    return result


async def held_case(
    stub: DraStub,
    base: Path,
    namespace: str,
    uid: str,
    claims: list[tuple[str, str]],
    held: list[tuple[tuple[str, str], int]],
    args: argparse.Namespace,
) -> dict[str, Any]:
    """The cycles again with ``held`` (claims of other domains, each on its own channel) prepared."""
    checkpoint_file = base / "plugins" / DRIVER / "checkpoint.json"
    first, first_channel = held[0]
    await prepare(stub, namespace, first, first_channel)
    one = unmarshal(checkpoint_file.read_bytes())
    for claim, number in held[1:]:
        started = time.monotonic()
        await prepare(stub, namespace, claim, number)
        # The plugin's client rate limit, as in the cycles.
        await asyncio.sleep(max(0.0, args.host_interval - (time.monotonic() - started)))
    many = unmarshal(checkpoint_file.read_bytes())
    samples = await cycle(stub, namespace, claims, CHANNEL, args.host_interval)
    for claim, _number in held:
        await unprepare(stub, namespace, claim)
    return {
        "held_claims": len(held),
        "prepare_ms_with_held": stats_ms(samples),
        "prepare_samples_ms_with_held": samples,
        "checkpoint_scan": [scan_costs(one, uid), scan_costs(many, uid)],
    }


async def isolation_phase(
    cluster: LocalCluster, state_dir: Path, node: str, namespace: str, args: argparse.Namespace
) -> dict[str, Any]:
    """Both isolations, host-managed, one after the other on fresh node state; see the module docstring."""
    results: dict[str, Any] = {"host_managed": True, "cycle_interval_s": round(args.host_interval, 3)}
    for isolation in ("domain", "channel"):
        base = state_dir / f"host-managed-{isolation}"
        results[isolation] = await one_isolation(cluster, base, node, namespace, isolation, args)
    domain_p50 = results["domain"]["prepare_ms"]["p50"]
    channel_p50 = results["channel"]["prepare_ms"]["p50"]
    results["channel_minus_domain_p50_ms"] = round(channel_p50 - domain_p50, 2)
    return results
