"""The objects whose names do not follow the release: the ones docs/migration.md §1 says to keep.

Every other object of the chart is named after the release (``<fullname>-...``), so a release taken
over from upstream's chart, or handed back, never collides with them. An object added with a fixed
name collides with upstream's install or with a second release, and the migration procedure has to
say what to do with it: this test names it.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.chart.helm import merge, nested, render

RELEASE = "migrating-release"
HOST_MANAGED = {"featureGates": {"HostManagedIMEX": True}}
CASES: dict[str, tuple[dict[str, Any], set[tuple[str, str]]]] = {
    "driver-managed": (
        {},
        {
            ("DeviceClass", "compute-domain-default-channel.nvidia.com"),
            ("DeviceClass", "compute-domain-daemon.nvidia.com"),
            ("ServiceAccount", "compute-domain-daemon-service-account"),
        },
    ),
    "host-managed": (HOST_MANAGED, {("DeviceClass", "compute-domain-default-channel.nvidia.com")}),
    # upstream refuses channel isolation, so its class never meets one of upstream's
    "channel-isolation": (
        merge(HOST_MANAGED, nested("resources.computeDomains.imex.isolation", "channel")),
        {
            ("DeviceClass", "compute-domain-default-channel.nvidia.com"),
            ("DeviceClass", "compute-domain-channel.nvidia.com"),
        },
    ),
}


@pytest.mark.parametrize(("values", "fixed"), CASES.values(), ids=CASES.keys())
def test_only_the_documented_objects_have_fixed_names(
    values: dict[str, Any], fixed: set[tuple[str, str]]
) -> None:
    """Every object's name starts with the release's, except the DeviceClasses and daemon account listed."""
    objects = render(values, release=RELEASE).objects
    named_otherwise = {
        (o["kind"], o["metadata"]["name"])
        for o in objects
        if not o["metadata"]["name"].startswith(f"{RELEASE}-")
    }
    assert named_otherwise == fixed
