"""What wakes the prepare retries from the ComputeDomain cache (docs/errors.md §3.3)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest

from imexdra.api.computedomain import ComputeDomain
from imexdra.kubeletplugin.domains import ComputeDomainCache
from tests.support.offline import offline_client

NODE = "node-a"


def domain(
    nodes: list[tuple[str, str]], *, channel: int | None = None, status: str = "NotReady"
) -> ComputeDomain:
    """A ComputeDomain whose ``status.nodes`` lists ``(node, status)`` pairs."""
    body: dict[str, Any] = {
        "metadata": {"name": "cd", "namespace": "team", "uid": "u-1"},
        "spec": {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": "t"}}},
        "status": {
            "status": status,
            "nodes": [
                {"name": name, "ipAddress": "10.0.0.1", "cliqueID": "c", "index": i, "status": state}
                for i, (name, state) in enumerate(nodes)
            ],
        },
    }
    if channel is not None:
        body["status"]["channel"] = channel
    return msgspec.convert(body, ComputeDomain)


@pytest.mark.parametrize(
    ("old", "new", "wakes"),
    [
        (domain([]), domain([("node-b", "Ready")]), False),
        (domain([(NODE, "NotReady")]), domain([(NODE, "NotReady"), ("node-b", "Ready")]), False),
        (domain([(NODE, "NotReady")]), domain([(NODE, "NotReady")], status="Ready"), False),
        (domain([]), domain([(NODE, "NotReady")]), True),
        (domain([(NODE, "NotReady")]), domain([(NODE, "Ready")]), True),
        (domain([(NODE, "Ready")]), domain([]), True),
        (domain([]), domain([], channel=7), True),
    ],
    ids=[
        "other-node-added",
        "other-node-beside-this-one",
        "overall-status-only",
        "this-node-added",
        "this-node-ready",
        "this-node-gone",
        "channel-recorded",
    ],
)
async def test_only_what_a_prepare_here_waits_for_wakes(
    tmp_path: Path, old: ComputeDomain, new: ComputeDomain, wakes: bool
) -> None:
    """A status change wakes the retries only when this node's entry or the domain's channel changed."""
    client = offline_client(tmp_path)
    cache = ComputeDomainCache(client, NODE)
    seen = cache.changes.generation
    cache._updated(old, new)
    assert (cache.changes.generation != seen) is wakes
    client.close()
