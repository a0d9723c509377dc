"""The plugin's API-facing pieces against the real apiserver: node labels, domain cache, readiness, slices.

Run in-process with an admin client (the RBAC the plugin needs is exercised by the process tests).
The objects touched are node-1's ComputeDomain label, this module's namespace and its own clique, and
the slices of a Node object without a kubelet, so nothing here disturbs other tests.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from imexdra.api.constants import CLIQUE_LABEL_KEY, DRIVER_NAME
from imexdra.api.imexmode import DRIVER_MANAGED_IMEX
from imexdra.common.kube.kubeclient import KubeClient
from imexdra.common.kube.models.core_v1 import Node as NodeResource
from imexdra.common.kube.models.resource_v1 import ResourceSlice
from imexdra.common.kube.transport import Transport
from imexdra.common.pacing.pulse import Pulse
from imexdra.dra.slicepublisher import SlicePublisher
from imexdra.kubeletplugin.configs.apply import DomainInfo
from imexdra.kubeletplugin.domains import CliqueReadiness, ComputeDomainCache
from imexdra.kubeletplugin.nodelabels import LabelConflictError, NodeLabeler
from imexdra.kubeletplugin.slices import slice_devices
from imexdra_sim.builders import compute_domain
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.integration.controller_harness import apiserver_requests, request_delta
from tests.integration.pluginharness import CLIQUE, DRIVER_NAMESPACE, install_api, node_labels
from tests.support.kubectl import apply, patch_status, uid_of
from tests.support.waiting import eventually

LABEL = "resource.nvidia.com/computeDomain"
NODE = "node-1"


@pytest.fixture(scope="module")
def namespace(cluster: LocalCluster) -> Iterator[str]:
    """CRDs installed and a namespace with one ComputeDomain ``train``."""
    install_api(cluster)
    name = f"kp-api-{uuid.uuid4().hex[:6]}"
    cluster.create_namespace(name)
    apply(cluster, compute_domain("train", name))  # numNodes 0: the CRD's default
    yield name
    cluster.kubectl("delete", "namespace", name, "--wait=false")


@pytest.fixture
async def labeler(kube: KubeClient, lean: Transport) -> AsyncIterator[NodeLabeler]:
    """A NodeLabeler for node-1; the label is removed afterwards."""
    yield NodeLabeler(lean, NODE)
    await kube.patch(NodeResource, NODE, {"metadata": {"labels": {LABEL: None}}})


def domain_uid(cluster: LocalCluster, namespace: str) -> str:
    return uid_of(cluster, "computedomain", "train", namespace)


async def test_label_add_remove_and_conflict(cluster: LocalCluster, labeler: NodeLabeler) -> None:
    """Add sets the label, a second domain conflicts, remove only removes its own value."""
    await labeler.add("domain-a")
    assert node_labels(cluster, NODE)[LABEL] == "domain-a"
    await labeler.add("domain-a")
    with pytest.raises(LabelConflictError, match="label already exists for a different ComputeDomain"):
        await labeler.add("domain-b")
    await labeler.remove("domain-b")
    assert node_labels(cluster, NODE)[LABEL] == "domain-a"
    await labeler.remove("domain-a")
    assert LABEL not in node_labels(cluster, NODE)


async def test_a_watching_labeler_skips_adds_its_cache_shows_done(
    cluster: LocalCluster,
    api: KubeClient,
    lean: Transport,
    labeler: NodeLabeler,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With its Node watched, an add the cache shows done makes no request; a label someone removed
    is seen by the watch and added again."""
    watching = NodeLabeler(lean, NODE, watch=api)
    assert watching.informer is not None
    runner = asyncio.create_task(watching.informer.run())
    try:
        await watching.add("domain-a")

        def cached() -> str | None:
            node = watching.informer.store.get_by_name(NODE)  # type: ignore[union-attr]
            return ((node.metadata.labels or {}) if node and node.metadata else {}).get(LABEL)

        await eventually("the label in the watch cache", lambda: cached() == "domain-a", within=10)

        async def no_request() -> dict[str, Any]:
            raise AssertionError("an add the cache shows done read the node")

        with monkeypatch.context() as patched:
            patched.setattr(watching, "_get", no_request)
            await watching.add("domain-a")
        cluster.kubectl("label", "node", NODE, f"{LABEL}-")
        await eventually("the removal in the watch cache", lambda: cached() is None, within=10)
        await watching.add("domain-a")
        assert node_labels(cluster, NODE)[LABEL] == "domain-a"
    finally:
        runner.cancel()


async def test_a_watching_labeler_writes_from_the_copy_the_watch_confirms(
    cluster: LocalCluster,
    api: KubeClient,
    lean: Transport,
    labeler: NodeLabeler,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Once the watch shows the resourceVersion of its own last write, the next change is an Update
    from that copy with no GET; after someone else's write the watch has seen, it GETs first."""
    watching = NodeLabeler(lean, NODE, watch=api)
    assert watching.informer is not None
    informer = watching.informer
    runner = asyncio.create_task(informer.run())
    gets = 0
    fetch = watching._get

    async def counted() -> dict[str, Any]:
        nonlocal gets
        gets += 1
        return await fetch()

    def watched(key: str) -> str | None:
        node = informer.store.get_by_name(NODE)
        return ((node.metadata.labels or {}) if node and node.metadata else {}).get(key)

    monkeypatch.setattr(watching, "_get", counted)
    try:
        await informer.wait_for_sync()
        # The harness kubelet writes the node every 5 s; a write between the labeler's and the next
        # change makes that change GET (rightly), so the scenario is tried again.
        for _ in range(5):
            await watching.add("domain-a")
            await eventually(
                "the label watched", lambda: watched(LABEL) == "domain-a", within=10, interval=0.02
            )
            confirmed = watching._current() is not None  # None: the kubelet wrote after the labeler
            gets = 0
            await watching.remove("domain-a")
            assert LABEL not in node_labels(cluster, NODE)
            if confirmed and gets == 0:
                break
            await eventually("the removal watched", lambda: watched(LABEL) is None, within=10, interval=0.02)
        else:
            pytest.fail("in 5 tries, no removal went out from the watch-confirmed copy without a GET")
        cluster.kubectl("label", "node", NODE, "imexdra-test/touched=yes")
        await eventually("the foreign label watched", lambda: watched("imexdra-test/touched"), within=10)
        gets = 0
        await watching.add("domain-a")
        assert gets >= 1
        labels = node_labels(cluster, NODE)
        assert (labels[LABEL], labels["imexdra-test/touched"]) == ("domain-a", "yes")
    finally:
        runner.cancel()
        cluster.kubectl("label", "node", NODE, "imexdra-test/touched-")


async def test_back_to_back_changes(cluster: LocalCluster, labeler: NodeLabeler) -> None:
    """add/remove/add in quick succession (each from the previous write's copy) ends labelled."""
    for _ in range(5):
        await labeler.add("domain-a")
        await labeler.remove("domain-a")
    await labeler.add("domain-a")
    assert node_labels(cluster, NODE)[LABEL] == "domain-a"


async def test_a_foreign_change_is_kept_without_a_conflict(
    cluster: LocalCluster, labeler: NodeLabeler
) -> None:
    """Someone else changed the node since the plugin's last write: each change starts from a fresh
    GET, so nothing meets a 409 and the other writer's label survives the full Update."""
    await labeler.add("domain-a")
    cluster.kubectl("label", "node", NODE, f"{LABEL}-", "imexdra-test/touched=yes", "--overwrite")
    before = apiserver_requests(cluster)
    await labeler.remove("domain-a")  # found already removed: no write
    await labeler.add("domain-a")
    after = apiserver_requests(cluster)
    labels = node_labels(cluster, NODE)
    assert labels[LABEL] == "domain-a"
    assert labels["imexdra-test/touched"] == "yes"
    assert request_delta(before, after, resource="nodes", code="409") == 0
    assert request_delta(before, after, resource="nodes", verb="PUT") == 1
    cluster.kubectl("label", "node", NODE, "imexdra-test/touched-")


async def test_concurrent_changes_of_one_node_meet_no_conflict(
    cluster: LocalCluster, labeler: NodeLabeler
) -> None:
    """Five prepares labelling the node for one domain at once, after a clique label patch: one
    Update, no 409 (the labeler serializes its changes)."""
    await labeler.add("domain-a")
    await labeler.remove("domain-a")
    before = apiserver_requests(cluster)
    await labeler.set_gpu_clique(CLIQUE)
    await asyncio.gather(*(labeler.add("domain-a") for _ in range(5)))
    after = apiserver_requests(cluster)
    await labeler.set_gpu_clique(None)
    await labeler.remove("domain-a")
    assert request_delta(before, after, resource="nodes", code="409") == 0
    assert request_delta(before, after, resource="nodes", verb="PUT") == 1


async def test_domain_cache_and_readiness(
    cluster: LocalCluster, kube: KubeClient, api: KubeClient, namespace: str
) -> None:
    """Lookups by UID across namespaces; readiness from the watched clique entry, or from the domain
    status; a change of this node's entry wakes the prepare retries, another node's does not."""
    cache = ComputeDomainCache(api, NODE)
    watch = asyncio.create_task(cache.run())
    # Its own pulse: other modules' domains come and go in the cache's pulse meanwhile.
    clique_changes = Pulse()
    readiness = CliqueReadiness(
        api,
        cache,
        node_name=NODE,
        namespace=DRIVER_NAMESPACE,
        clique_id=CLIQUE,
        cliques_enabled=True,
        changes=clique_changes,
    )
    assert readiness.informer is not None
    clique_watch = asyncio.create_task(readiness.informer.run())
    try:
        uid = domain_uid(cluster, namespace)
        assert await cache.get(uid) == DomainInfo(uid, "train", namespace)
        assert await cache.get(str(uuid.uuid4())) is None
        domain = DomainInfo(uid, "train", namespace)
        assert not await readiness.node_ready(domain, CLIQUE)
        clique_name = f"{uid}.{CLIQUE}"
        entry = {"nodeName": NODE, "ipAddress": "127.0.0.9", "cliqueID": CLIQUE, "index": 0}
        clique: dict[str, Any] = {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomainClique",
            "metadata": {
                "name": clique_name,
                "namespace": DRIVER_NAMESPACE,
                "labels": {LABEL: uid, CLIQUE_LABEL_KEY: CLIQUE},
            },
            "daemons": [{**entry, "status": "NotReady"}],
        }
        seen = clique_changes.generation
        apply(cluster, clique)
        assert await clique_changes.wait_past(seen, 10)  # this node's entry appeared
        assert not await readiness.node_ready(domain, CLIQUE)
        seen = clique_changes.generation
        other = {**entry, "nodeName": "node-2", "index": 1, "status": "Ready"}
        clique["daemons"].append(other)
        apply(cluster, clique)
        await eventually(
            "the other node's entry cached",
            lambda: len(readiness.informer.store.get_by_name(clique_name, DRIVER_NAMESPACE).daemons) == 2,  # type: ignore[union-attr]
            within=10,
        )
        assert clique_changes.generation == seen  # another node's daemon: nothing to wake
        clique["daemons"][0]["status"] = "Ready"
        apply(cluster, clique)
        assert await clique_changes.wait_past(seen, 10)  # this node's daemon Ready: retries wake
        assert await readiness.node_ready(domain, CLIQUE)
        assert not await readiness.node_ready(domain, "")  # no clique: only the status can say Ready
        assert not await readiness.node_ready(domain, "other.clique")  # not watched: read with a GET
        node_entry = {
            "name": "node-2",
            "ipAddress": "127.0.0.8",
            "cliqueID": "",
            "index": 1,
            "status": "Ready",
        }
        seen = cache.changes.generation
        patch_status(
            cluster,
            "computedomain",
            "train",
            namespace,
            {"status": {"status": "NotReady", "nodes": [node_entry]}},
        )
        await eventually(
            "another node's entry cached", lambda: cache.node_status_ready(uid, "node-2"), within=10
        )
        nodes = [node_entry, {**node_entry, "name": NODE, "index": 0}]
        patch_status(
            cluster, "computedomain", "train", namespace, {"status": {"status": "Ready", "nodes": nodes}}
        )
        await eventually("this node's entry cached", lambda: readiness.node_ready(domain, ""), within=10)
        assert cache.changes.generation > seen  # this node's daemon Ready in the status: retries wake
        assert cache.uids() is not None and uid in cache.uids()  # type: ignore[operator]
    finally:
        watch.cancel()
        clique_watch.cancel()


async def test_slice_publisher_converges(kube: KubeClient, api: KubeClient) -> None:
    """Create once; recreate after deletion; fix a changed slice in place; delete extra slices."""
    pool = f"ghost-{uuid.uuid4().hex[:6]}"  # a Node object no kubelet owns (nor wipes slices of)
    ghost = await kube.create(NodeResource.from_dict({"metadata": {"name": pool}}))
    owner_uid = ghost.metadata.uid

    async def node_uid() -> str:
        return str(owner_uid)

    publisher = SlicePublisher(
        api,
        driver_name=DRIVER_NAME,
        node_name=pool,
        devices=slice_devices(imex=DRIVER_MANAGED_IMEX),
        node_uid=node_uid,
        settle_delay=0.1,
    )
    task = asyncio.create_task(publisher.run())

    async def slices() -> list[ResourceSlice]:
        return [s async for s in kube.list(ResourceSlice, fields={"spec.nodeName": pool})]

    try:
        [first] = await eventually("slice created", slices, within=30)
        assert first.metadata is not None and first.metadata.name is not None
        assert first.metadata.name.startswith(f"00000-compute-domain.nvidia.com-{pool}-")
        assert first.metadata.ownerReferences is not None
        assert first.metadata.ownerReferences[0].uid == owner_uid

        await kube.delete(ResourceSlice, first.metadata.name)
        [second] = await eventually(
            "slice recreated", lambda: _other_than(slices, first.metadata.name), within=30
        )
        assert second.spec is not None and second.spec.pool.generation == 1  # nothing left to outrank

        body = second.to_dict()
        body["spec"]["devices"] = body["spec"]["devices"][:1]
        await kube.replace(ResourceSlice.from_dict(body))
        extra = ResourceSlice.from_dict({**body, "metadata": {"name": f"00001-extra-{pool}"}})
        await kube.create(extra)

        async def repaired() -> bool:
            current = await slices()
            return (
                len(current) == 1 and current[0].spec is not None and len(current[0].spec.devices or []) == 2
            )

        await eventually("slice repaired, extra deleted", repaired, within=30)
        [final] = await slices()
        assert final.metadata is not None and final.metadata.name == second.metadata.name  # type: ignore[union-attr]
    finally:
        task.cancel()
        await kube.delete(NodeResource, pool)  # the garbage collector takes the slices with it


async def _other_than(slices: Any, name: str | None) -> list[ResourceSlice]:
    current: list[ResourceSlice] = await slices()
    return [s for s in current if s.metadata is not None and s.metadata.name != name]
