"""Deriving membership from the controller's clique object or ComputeDomain status."""

from __future__ import annotations

from imexdra.api.computedomain import (
    ComputeDomain,
    ComputeDomainChannelSpec,
    ComputeDomainNode,
    ComputeDomainSpec,
    ComputeDomainStatus,
    ResourceClaimTemplateReference,
)
from imexdra.api.computedomainclique import ComputeDomainClique, ComputeDomainDaemonInfo
from imexdra.api.constants import COMPUTE_DOMAIN_LABEL_KEY, ComputeDomainStatusValue
from imexdra.common.kube.models.meta_v1 import ObjectMeta
from imexdra.daemon.membership import (
    Identity,
    Membership,
    Peer,
    belongs_to,
    membership_from_clique,
    membership_from_compute_domain,
)

CLIQUE = "5f0f6d3e-0000-4000-8000-000000000001.7"
ME = Identity(node_name="node-b", pod_ip="10.0.0.2", clique_id=CLIQUE, compute_domain_uid="cd-uid")


def daemon(node: str, ip: str, index: int, clique: str = CLIQUE) -> ComputeDomainDaemonInfo:
    return ComputeDomainDaemonInfo(node_name=node, ip_address=ip, clique_id=clique, index=index)


def test_clique_members_sorted_with_own_entry() -> None:
    """Members come sorted by index; the own entry is the one with this node and pod IP."""
    clique = ComputeDomainClique(
        metadata=ObjectMeta(name=f"cd-uid.{CLIQUE}"),
        daemons=[
            daemon("node-c", "10.0.0.3", 2),
            daemon("node-b", "10.0.0.2", 1),
            daemon("node-a", "10.0.0.1", 0),
        ],
    )
    membership = membership_from_clique(clique, ME)
    assert [p.node_name for p in membership.peers] == ["node-a", "node-b", "node-c"]
    assert membership.own == Peer("node-b", "10.0.0.2", 1)
    assert membership.expected == 0


def test_entry_of_a_predecessor_pod_is_not_own() -> None:
    """An entry for this node with another IP is an older pod's: not yet this daemon's."""
    clique = ComputeDomainClique(daemons=[daemon("node-b", "10.0.0.99", 0)])
    membership = membership_from_clique(clique, ME)
    assert membership.own is None
    assert membership.peers == (Peer("node-b", "10.0.0.99", 0),)


def test_other_cliques_are_ignored_and_status_does_not_matter() -> None:
    """Entries of another clique are dropped; readiness is not part of membership."""
    ready = daemon("node-a", "10.0.0.1", 0)
    ready.status = ComputeDomainStatusValue.READY
    clique = ComputeDomainClique(daemons=[ready, daemon("node-x", "10.9.9.9", 0, clique="other.1")])
    not_ready = ComputeDomainClique(daemons=[daemon("node-a", "10.0.0.1", 0)])
    assert membership_from_clique(clique, ME) == membership_from_clique(not_ready, ME)
    assert [p.node_name for p in membership_from_clique(clique, ME).peers] == ["node-a"]


def test_missing_objects_mean_no_members() -> None:
    """Before the controller writes anything there is no membership."""
    assert membership_from_clique(None, ME) == Membership()
    assert membership_from_compute_domain(None, ME) == Membership()


def test_compute_domain_status_source_carries_num_nodes() -> None:
    """With cliques off, status.nodes of this clique are the members and numNodes is the expectation."""
    cd = ComputeDomain(
        metadata=ObjectMeta(name="cd", uid="cd-uid"),
        spec=ComputeDomainSpec(
            channel=ComputeDomainChannelSpec(
                resource_claim_template=ResourceClaimTemplateReference(name="t")
            ),
            num_nodes=3,
        ),
        status=ComputeDomainStatus(
            status=ComputeDomainStatusValue.NOT_READY,
            nodes=[
                ComputeDomainNode(name="node-b", ip_address="10.0.0.2", clique_id=CLIQUE, index=0),
                ComputeDomainNode(name="node-z", ip_address="10.0.0.26", clique_id="", index=-1),
            ],
        ),
    )
    membership = membership_from_compute_domain(cd, ME)
    assert membership == Membership(
        peers=(Peer("node-b", "10.0.0.2", 0),), own=Peer("node-b", "10.0.0.2", 0), expected=3
    )


def test_belongs_to_checks_the_domain_label() -> None:
    """Only objects labelled with this daemon's ComputeDomain UID are accepted."""
    assert belongs_to({COMPUTE_DOMAIN_LABEL_KEY: "cd-uid"}, ME)
    assert not belongs_to({COMPUTE_DOMAIN_LABEL_KEY: "other"}, ME)
    assert not belongs_to(None, ME)
