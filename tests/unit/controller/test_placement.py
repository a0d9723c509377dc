"""Where a domain's objects live (docs/tenancy.md, "A fixed place, not a label").

Aspects covered: each kind's place (namespace and name) holds and nothing beside it; a domain's home
comes from its namespace and spec; with the domain gone, the sweep's test keeps the fixed places and
leaves a workload template's namespace open.
"""

from __future__ import annotations

import pytest

from imexdra.controller.placement import Home, Kind, Places, home_of
from tests.unit.controller.support import make_domain

UID = "6f1c2c4e-0000-4000-8000-000000000001"
DAEMON = f"computedomain-daemon-{UID}"
PLACES = Places("nvidia-dra-driver", frozenset({"nvidia-dra-driver", "extra-ns"}))
HOME = Home(uid=UID, namespace="team-a", workload_template="cd-channel")


@pytest.mark.parametrize(
    ("kind", "namespace", "name", "expected"),
    [
        (Kind.WORKLOAD_TEMPLATE, "team-a", "cd-channel", True),
        (Kind.WORKLOAD_TEMPLATE, "tenant", "cd-channel", False),
        (Kind.WORKLOAD_TEMPLATE, "team-a", "lookalike", False),
        (Kind.DAEMON_TEMPLATE, "nvidia-dra-driver", DAEMON, True),
        (Kind.DAEMON_TEMPLATE, "extra-ns", DAEMON, True),
        (Kind.DAEMON_TEMPLATE, "team-a", DAEMON, False),
        (Kind.DAEMON_TEMPLATE, "nvidia-dra-driver", "computedomain-daemon-other", False),
        (Kind.DAEMON_SET, "nvidia-dra-driver", DAEMON, True),
        (Kind.DAEMON_SET, "nvidia-dra-driver", "lookalike", False),
        (Kind.CLIQUE, "nvidia-dra-driver", f"{UID}.cluster.0", True),
        (Kind.CLIQUE, "extra-ns", f"{UID}.cluster.0", False),
        (Kind.CLIQUE, "nvidia-dra-driver", "other.cluster.0", False),
        (Kind.CLIQUE, "nvidia-dra-driver", f"{UID}x.cluster.0", False),
    ],
)
def test_an_object_counts_only_in_its_place(kind: Kind, namespace: str, name: str, expected: bool) -> None:
    """The right namespace and the right name, both; the label alone is never enough."""
    assert PLACES.holds(kind, HOME, namespace, name) is expected


def test_home_comes_from_the_domains_namespace_and_spec() -> None:
    """The workload template sits in the domain's namespace under spec.channel.resourceClaimTemplate.name."""
    cd = make_domain(name="train", namespace="team-a", uid=UID)
    home = home_of(cd)
    assert (home.uid, home.namespace) == (UID, "team-a")
    assert cd.spec is not None and home.workload_template == cd.spec.channel.resource_claim_template.name


@pytest.mark.parametrize(
    ("kind", "namespace", "name", "expected"),
    [
        (Kind.WORKLOAD_TEMPLATE, "any-namespace", "any-name", True),
        (Kind.DAEMON_TEMPLATE, "tenant", DAEMON, False),
        (Kind.DAEMON_SET, "extra-ns", DAEMON, True),
        (Kind.CLIQUE, "tenant", f"{UID}.cluster.0", False),
    ],
)
def test_with_the_domain_gone_only_fixed_places_are_checked(
    kind: Kind, namespace: str, name: str, expected: bool
) -> None:
    """The sweep cannot know a vanished domain's namespace; everything else stays fixed."""
    assert PLACES.could_hold(kind, UID, namespace, name) is expected
