"""Where a ComputeDomain's objects live: an object counts for a domain only in that domain's place.

The label ``resource.nvidia.com/computeDomain=<uid>`` says which domain an object claims to belong
to; any tenant with ``edit`` can put it on an object of its own namespace, and a domain's UID is easy
to learn. So the label alone proves nothing (docs/tenancy.md, "A fixed place, not a label"). An
object counts for domain D only when it carries D's label **and** sits where D's objects live, under
D's name:

| Kind | Namespace | Name |
|---|---|---|
| workload ResourceClaimTemplate | D's namespace | ``spec.channel.resourceClaimTemplate.name`` |
| daemon ResourceClaimTemplate, DaemonSet | a managed namespace | ``computedomain-daemon-<uid>`` |
| ComputeDomainClique | the driver namespace | ``<uid>.<cliqueID>`` |
| ResourceClaim using D's channel (in-use protection) | D's namespace | any |

Everything else with D's label is a *look-alike*: no decision about D reads it (readiness, create,
teardown, in-use, isolation mode), the controller never writes it, and it is reported once by an
event in its own namespace. These are the places upstream's controller puts its objects, so objects
it made are adopted unchanged (docs/migration.md). A ComputeDomain's spec is immutable, so its place
never moves.

When the domain is gone (its UID unknown: a finalizer removed by hand), the stale-object sweep can
only check what does not depend on the domain: the daemon objects' and cliques' places. A workload
template's namespace is its domain's, which nobody can tell any more; such a template is the
namespace's own business and the sweep removes it as upstream's does.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from imexdra.api.computedomain import ComputeDomain
from imexdra.api.constants import daemon_object_name


class Kind(StrEnum):
    """The kinds of object a domain owns."""

    WORKLOAD_TEMPLATE = "workload ResourceClaimTemplate"
    DAEMON_TEMPLATE = "daemon ResourceClaimTemplate"
    DAEMON_SET = "DaemonSet"
    CLIQUE = "ComputeDomainClique"


@dataclass(frozen=True, slots=True)
class Home:
    """One domain's place: its UID, its namespace and the name of its workload template."""

    uid: str
    namespace: str
    workload_template: str


def home_of(cd: ComputeDomain) -> Home:
    """The place of ``cd``'s objects (``namespace/name`` of its workload template, and its UID)."""
    meta = cd.metadata
    assert meta is not None and meta.uid, "a cached ComputeDomain has metadata and a UID"
    name = cd.spec.channel.resource_claim_template.name if cd.spec is not None else ""
    return Home(uid=meta.uid, namespace=meta.namespace or "", workload_template=name)


@dataclass(frozen=True, slots=True)
class Places:
    """The install's fixed namespaces: the driver's, and every one daemon objects may live in."""

    driver_namespace: str
    managed_namespaces: frozenset[str]

    def holds(self, kind: Kind, home: Home, namespace: str, name: str) -> bool:
        """Whether an object of ``kind`` at ``namespace/name`` is in ``home``'s place."""
        if kind is Kind.WORKLOAD_TEMPLATE:
            return namespace == home.namespace and name == home.workload_template
        return self.could_hold(kind, home.uid, namespace, name)

    def could_hold(self, kind: Kind, uid: str, namespace: str, name: str) -> bool:
        """Whether ``namespace/name`` may be an object of ``kind`` of the domain ``uid``, home unknown."""
        if kind is Kind.WORKLOAD_TEMPLATE:
            return True  # the home is the domain's namespace, unknown once the domain is gone
        if kind is Kind.CLIQUE:
            return namespace == self.driver_namespace and name.startswith(f"{uid}.")
        return namespace in self.managed_namespaces and name == daemon_object_name(uid)
