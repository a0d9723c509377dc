"""The controller's -v levels 0-7 as its log shows them (docs/logging.md §2, upstream's klog meaning).

For each level the real ``compute-domain-controller`` runs at ``--v=N`` (JSON logs, which carry each
line's ``v``) through the same work: a stale claim template of a domain that does not exist is swept,
a host-managed ComputeDomain becomes Ready and is deleted. Its log must hold no line above N, and each
level's marker line of the table in docs/logging.md exactly when N reaches that level: 1 the cleanup of
a stale object, 2 ``Processing added or updated ComputeDomain`` and ``Caches populated``, 3 ``Listing
and watching``, 4 debug detail, 6 every API request. Levels 5 and 7 add nothing of their own (as in
upstream, where nothing of the ComputeDomain driver logs at them): they log what 4 and 6 log.
"""

from __future__ import annotations

import secrets
import uuid
from typing import Any

import pytest

from imexdra.api.constants import COMPUTE_DOMAIN_LABEL_KEY, TARGET_LABEL_KEY, ClaimTemplateTarget
from imexdra_sim.builders import compute_domain
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.integration.controller_harness import controller_running, foreign_template
from tests.support.kubectl import apply, get_json
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

SUFFIX = secrets.token_hex(3)
#: The first level each marker appears at, and how to recognise it in a decoded line.
MARKERS: dict[int, tuple[str, ...]] = {
    0: ("controller manager config",),
    1: ("Cleanup: stale object found for ComputeDomain",),
    2: ("Processing added or updated ComputeDomain", "Caches populated"),
    3: ("Listing and watching",),
    6: ("HTTP Request:",),
}


def stale_template(namespace: str) -> dict[str, Any]:
    """A claim template labelled for a ComputeDomain that does not exist: the controller's to sweep."""
    template = foreign_template(f"stale-{secrets.token_hex(3)}", namespace)
    # Under HostManagedIMEX the controller watches only workload templates (docs/host-managed.md).
    template["metadata"]["labels"] = {
        COMPUTE_DOMAIN_LABEL_KEY: str(uuid.uuid4()),
        TARGET_LABEL_KEY: ClaimTemplateTarget.WORKLOAD.value,
    }
    return template


def exists(cluster: LocalCluster, kind: str, name: str, namespace: str) -> bool:
    """Whether the object is still there."""
    found = cluster.kubectl("get", kind, name, "-n", namespace, "--ignore-not-found", "-o", "name")
    return bool(found.stdout.strip())


@pytest.mark.parametrize("verbosity", range(8))
async def test_each_level_logs_its_table_row_and_nothing_above(
    cluster: LocalCluster, compute_domain_crds: None, verbosity: int
) -> None:
    """Nothing above ``--v``; every marker of a level at or below it, none of a level above."""
    driver_ns, user_ns = f"imexdra-v{verbosity}-{SUFFIX}", f"cd-v{verbosity}-{SUFFIX}"
    name = f"controller-v{verbosity}-{SUFFIX}"
    args = (f"--v={verbosity}",)
    async with controller_running(
        cluster, driver_ns, user_ns, name, gates="HostManagedIMEX=true", extra_args=args
    ) as controller:
        stale = stale_template(user_ns)
        apply(cluster, stale)
        stale_name = stale["metadata"]["name"]
        await eventually(
            "the stale template swept",
            lambda: not exists(cluster, "resourceclaimtemplate", stale_name, user_ns),
        )
        apply(cluster, compute_domain("cd", user_ns))
        await eventually(
            "cd Ready",
            lambda: (
                get_json(cluster, "computedomain", "cd", "-n", user_ns).get("status", {}).get("status")
                == "Ready"
            ),
        )
        cluster.kubectl("delete", "computedomain", "cd", "-n", user_ns, "--timeout=60s")
    events = controller.log_events()
    levels = {int(e["v"]) for e in events if "v" in e}
    assert levels and max(levels) <= verbosity, f"lines above --v={verbosity}: {sorted(levels)}"
    assert (4 in levels) == (verbosity >= 4), "debug detail (v=4) exactly from --v=4"
    messages = [str(e.get("msg", "")) for e in events]
    for level, markers in MARKERS.items():
        for marker in markers:
            found = any(m.startswith(marker) for m in messages)
            assert found == (verbosity >= level), f"{marker!r} (level {level}) at --v={verbosity}: {found}"
