"""Upgrade and downgrade with a workload running: an earlier release to this tree and back.

``make upgrade-test`` (``--upgrade-from=<commit>``; collected only with it): the earlier commit is
checked out and its image built (tests/support/checkouts.py), both releases are published to the
cluster's registry with tools/release.py (the earlier one under ``<registry>/previous``), and on a
two-node containerd rack installed from the earlier release, as upstream's up/downgrade suite does:

1. a ComputeDomain across both nodes and a worker on each run, prepared by the earlier plugin;
2. the new release's CRDs are applied (``helm show crds | kubectl apply --server-side``) and
   ``helm upgrade`` moves to this tree: the workers are the same containers, never restarted; the
   driver's pods run the new image; both nodes are Ready in the domain; worker 0 is deleted and the
   new plugin unprepares a claim the earlier one prepared;
3. ``helm rollback`` returns to the earlier release: worker 1 undisturbed, the driver on the earlier
   image, worker 1's node Ready in the domain (worker 0's node left it with its worker); deleting
   worker 1 and the domain unprepares cleanly (no checkpoint entry, no CDI spec, no node label left).

Each phase's duration and the commits are written to bench/results/upgrade.json (docs/registry.md §2).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from imexdra_sim import rack
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.e2e.helpers import (
    COMPUTE_DOMAIN_LABEL,
    CONTROLLER_SELECTOR,
    PLUGIN_SELECTOR,
    cdi_spec,
    claim_uid_of,
    domain_status,
    driver_pods,
    is_ready,
    prepared_on,
    start_domain_workload,
    workload_containers,
)
from tests.support.checkouts import Checkout, resolve
from tests.support.waiting import wait_until

NAMESPACE = "upgrade"
DOMAIN = "survivor"
RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results" / "upgrade.json"


def driver_images(cluster: LocalCluster) -> set[str]:
    """The images the driver's Ready pods run, once every one of them is Ready (one per node + 1)."""
    pods = driver_pods(cluster, CONTROLLER_SELECTOR) + driver_pods(cluster, PLUGIN_SELECTOR)
    if len(pods) != 1 + len(cluster.nodes) or not all(map(is_ready, pods)):
        return set()
    return {c["image"] for p in pods for c in p["spec"]["containers"]}


def settled_on(cluster: LocalCluster, image: str, nodes: list[str]) -> bool:
    """Whether every driver pod runs ``image`` and is Ready, and the domain has ``nodes`` Ready.

    The domain's own status is Ready only with all its ``numNodes``: once a worker is gone its node
    leaves the domain (its daemon goes with the node's label), so the rest is checked per node.
    """
    status = domain_status(cluster, NAMESPACE, DOMAIN)
    ready = {n["name"] for n in status.get("nodes", []) if n.get("status") == "Ready"}
    return driver_images(cluster) == {image} and ready >= set(nodes)


def apply_crds(cluster: LocalCluster, chart: list[str]) -> None:
    """What the upgrade page says to do first: the release's CRDs, applied server-side."""
    assert cluster.binaries is not None
    helm = [str(cluster.binaries.path("helm")), "show", "crds", *chart]
    crds = cluster.run(*helm).stdout
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=crds)


def unprepared(cluster: LocalCluster, node: str, claim: str) -> bool:
    """Whether ``node``'s plugin has forgotten ``claim``: no checkpoint entry, no CDI spec."""
    return claim not in prepared_on(cluster, node) and not cdi_spec(cluster, node, claim).exists()


def test_upgrade_and_rollback_leave_the_workload_running(
    upgrade_rack: LocalCluster, earlier_checkout: Checkout
) -> None:
    """Earlier release → this tree → earlier: workers never restart; claims unprepare cleanly on both."""
    cluster, earlier = upgrade_rack, earlier_checkout
    phases: dict[str, float] = {}
    t0 = time.monotonic()
    previous = rack.published_release(cluster, "previous")
    nodes = [node.name for node in cluster.nodes]
    cluster.create_namespace(NAMESPACE)
    start_domain_workload(cluster, NAMESPACE, DOMAIN, nodes, num_nodes=len(nodes))
    wait_until("the driver on the earlier image", lambda: settled_on(cluster, previous["image"], nodes))
    before = workload_containers(cluster, NAMESPACE)
    claims = {node: claim_uid_of(cluster, NAMESPACE, f"worker-{i}") for i, node in enumerate(nodes)}
    phases["workload_running_on_earlier"] = time.monotonic() - t0

    t0 = time.monotonic()
    current = rack.publish_release(cluster)
    apply_crds(cluster, rack.release_chart(cluster, current))
    rack.upgrade_chart(cluster, {}, chart=rack.release_chart(cluster, current))
    wait_until(
        "the driver on this tree's image, both nodes Ready in the domain",
        lambda: settled_on(cluster, current["image"], nodes),
    )
    phases["upgrade"] = time.monotonic() - t0
    assert workload_containers(cluster, NAMESPACE) == before  # same pods, containers, restart counts

    t0 = time.monotonic()
    cluster.kubectl("delete", "pod", "worker-0", "-n", NAMESPACE, "--wait=true", timeout=120)
    wait_until(
        "the new plugin unprepared the earlier one's claim",
        lambda: unprepared(cluster, nodes[0], claims[nodes[0]]),
    )
    phases["unprepare_by_new_plugin"] = time.monotonic() - t0

    t0 = time.monotonic()
    assert cluster.binaries is not None
    cluster.run(
        str(cluster.binaries.path("helm")),
        "rollback",
        rack.RELEASE,
        "1",
        f"--kubeconfig={cluster.kubeconfig}",
        f"--namespace={rack.DRIVER_NAMESPACE}",
        "--wait",
        "--timeout=180s",
        timeout=240,
    )
    wait_until(
        "the driver back on the earlier image", lambda: settled_on(cluster, previous["image"], nodes[1:])
    )
    phases["rollback"] = time.monotonic() - t0
    assert workload_containers(cluster, NAMESPACE) == {nodes[1]: before[nodes[1]]}

    t0 = time.monotonic()
    cluster.kubectl("delete", "pod", "worker-1", "-n", NAMESPACE, "--wait=true", timeout=120)
    cluster.kubectl("delete", "computedomain", DOMAIN, "-n", NAMESPACE, "--wait=true", timeout=120)
    wait_until(
        "the earlier plugin unprepared its claim", lambda: unprepared(cluster, nodes[1], claims[nodes[1]])
    )
    wait_until(
        "no node labelled for a ComputeDomain",
        lambda: not cluster.kubectl("get", "nodes", "-l", COMPUTE_DOMAIN_LABEL, "-o", "name").stdout.strip(),
    )
    phases["teardown_on_earlier"] = time.monotonic() - t0
    record(earlier, previous, current, phases)


def record(
    earlier: Checkout, previous: dict[str, Any], current: dict[str, Any], phases: dict[str, float]
) -> None:
    """Write what ran and how long each phase took (all checks passed if this is reached)."""
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "from": {"commit": earlier.commit, "image": previous["image"]},
                "to": {"commit": resolve("HEAD"), "image": current["image"], "revision": current["revision"]},
                "result": "passed",
                "phases_seconds": {k: round(v, 1) for k, v in phases.items()},
            },
            indent=2,
        )
        + "\n"
    )
