"""The controller's view of the cluster: one informer per kind and scope, read through overlays.

What is watched (upstream's set, minus what HostManagedIMEX never needs, docs/data-path.md §10):

| Kind | Scope | Selector | Driver-managed | Host-managed |
|---|---|---|---|---|
| ComputeDomain | all namespaces | — | yes | yes |
| ResourceClaimTemplate | all namespaces | CD label (host-managed: target Workload) | yes | yes |
| DaemonSet, Pod | each managed namespace | CD label | yes | no |
| ComputeDomainClique | driver namespace | — | gate ComputeDomainCliques | no |
| Node | cluster | CD label | yes | no |
| ResourceClaim (``ChannelClaim``) | all namespaces | — | protection¹ | protection¹ or channel isolation |

¹ in-use protection (docs/in-use-protection.md), on unless ``--compute-domain-in-use-protection=false``.
``ChannelClaim`` keeps a claim's UID, the channels it holds and the pods using them, nothing else;
``DaemonSetMeta`` keeps a DaemonSet's metadata only: the controller never reads a DaemonSet's spec or
status, and its pod template is the largest object the controller would otherwise cache
(bench/README.md, "Side by side with upstream's controller").

Every store is indexed by the owning domain's UID (``overlay.DOMAIN_INDEX``; for ComputeDomains their
own UID), so a reconcile finds a domain's objects without scanning. The label only nominates: what the
accessors below return for a domain is what sits in its place (``placement``); ``lookalikes`` returns
the rest, for reporting.

Daemon pods and claims awaiting a binding decision are also indexed by ``<domain UID>/<node>``
(``DOMAIN_NODE_INDEX``): under binding conditions a change on one node concerns that node's claims and
daemon only, and a decision reads one node's daemon pod, not the domain's (docs/binding-conditions.md,
"Cost").
"""

from __future__ import annotations

from typing import Any, ClassVar

from imexdra.api.computedomain import ComputeDomain
from imexdra.api.computedomainclique import ComputeDomainClique
from imexdra.api.constants import COMPUTE_DOMAIN_LABEL_KEY, TARGET_LABEL_KEY, ClaimTemplateTarget
from imexdra.common.kube.api import KubeApi
from imexdra.common.kube.models.apps_v1 import DaemonSet
from imexdra.common.kube.models.core_v1 import Node, Pod
from imexdra.common.kube.models.meta_v1 import ObjectMeta
from imexdra.common.kube.models.resource_v1 import ResourceClaimTemplate
from imexdra.common.kube.resource import ApiInfo, Model
from imexdra.common.machinery.informer import EventHandler, Informer
from imexdra.common.machinery.store import KubeObject, T, index_by_label, index_by_uid
from imexdra.controller.claimholds import ChannelClaim, index_by_used_domain
from imexdra.controller.config import ControllerConfig
from imexdra.controller.daemons import DaemonPod, daemon_pod
from imexdra.controller.overlay import DOMAIN_INDEX, Overlay
from imexdra.controller.placement import Home, Kind, Places


class DaemonSetMeta(Model, kw_only=True):
    """An ``apps/v1`` DaemonSet as the controller keeps it: its metadata; spec and status are not decoded."""

    _api_info: ClassVar[ApiInfo] = DaemonSet._api_info

    metadata: ObjectMeta | None = None


def domain_label(obj: KubeObject) -> str | None:
    """The owning domain's UID from the CD label."""
    labels = obj.metadata.labels if obj.metadata else None
    return (labels or {}).get(COMPUTE_DOMAIN_LABEL_KEY) or None


def own_uid(obj: KubeObject) -> str | None:
    """A ComputeDomain's own UID."""
    return obj.metadata.uid if obj.metadata else None


def template_target(template: ResourceClaimTemplate) -> str | None:
    """``Daemon`` or ``Workload`` from the target label."""
    labels = template.metadata.labels if template.metadata else None
    return (labels or {}).get(TARGET_LABEL_KEY)


#: Index of daemon pods (by ``spec.nodeName``) and pending-binding claims (by allocated node).
DOMAIN_NODE_INDEX = "domain-node"


def domain_node(uid: str, node: str) -> str:
    """The ``DOMAIN_NODE_INDEX`` value of domain ``uid``'s objects on ``node``."""
    return f"{uid}/{node}"


def pod_node(pod: Pod) -> str | None:
    """The node a pod is scheduled to, if any."""
    return (pod.spec.nodeName if pod.spec is not None else None) or None


def index_by_domain_node(pod: Pod) -> list[str]:
    """Index function: a daemon pod's domain (its label) and node."""
    uid, node = domain_label(pod), pod_node(pod)
    return [domain_node(uid, node)] if uid and node else []


def index_by_pending_node(claim: ChannelClaim) -> list[str]:
    """Index function: a pending binding's domain (``""`` if none) and allocated node."""
    binding = claim.binding
    return [domain_node(binding.domain, binding.node)] if binding is not None else []


_TEMPLATE_KINDS = {
    ClaimTemplateTarget.WORKLOAD.value: Kind.WORKLOAD_TEMPLATE,
    ClaimTemplateTarget.DAEMON.value: Kind.DAEMON_TEMPLATE,
}


def template_kind(template: ResourceClaimTemplate) -> Kind | None:
    """A claim template's kind by its target label; None for a template of neither target."""
    return _TEMPLATE_KINDS.get(template_target(template) or "")


class Caches:
    """Informers and overlays for everything the controller reads."""

    def __init__(self, client: KubeApi, config: ControllerConfig) -> None:
        resync = config.resync_seconds
        self.places = Places(config.driver_namespace, frozenset(config.managed_namespaces))
        by_label = {DOMAIN_INDEX: index_by_label(COMPUTE_DOMAIN_LABEL_KEY)}
        self.informers: list[Informer[Any]] = []

        def watch(resource: type[T], indexers: Any, **kwargs: Any) -> Informer[T]:
            informer = Informer(client, resource, indexers=indexers, resync_period=resync, **kwargs)
            self.informers.append(informer)
            return informer

        self.domains = watch(ComputeDomain, {DOMAIN_INDEX: index_by_uid})
        self.domain_view = Overlay([self.domains.store], own_uid)
        selector = COMPUTE_DOMAIN_LABEL_KEY
        if not config.imex_mode.runs_imex_daemons:
            selector += f",{TARGET_LABEL_KEY} in ({ClaimTemplateTarget.WORKLOAD.value})"
        self.templates = watch(ResourceClaimTemplate, by_label, label_selector=selector)
        self.template_view = Overlay([self.templates.store], domain_label)
        self.daemon_sets: list[Informer[DaemonSetMeta]] = []
        self.pods: list[Informer[Pod]] = []
        self.cliques: Informer[ComputeDomainClique] | None = None
        self.nodes: Informer[Node] | None = None
        if config.imex_mode.runs_imex_daemons:
            for namespace in config.managed_namespaces:
                scope = {"namespace": namespace, "label_selector": COMPUTE_DOMAIN_LABEL_KEY}
                self.daemon_sets.append(watch(DaemonSetMeta, by_label, **scope))
                self.pods.append(watch(Pod, by_label | {DOMAIN_NODE_INDEX: index_by_domain_node}, **scope))
            self.nodes = watch(Node, by_label, label_selector=COMPUTE_DOMAIN_LABEL_KEY)
            if config.cliques_enabled:
                self.cliques = watch(ComputeDomainClique, by_label, namespace=config.driver_namespace)
        #: Every claim's held channel numbers (docs/channel-isolation.md §4) and the pods using each
        #: domain's channel (docs/in-use-protection.md §3), indexed by that domain, and the pending
        #: bindings by domain and node; no overlay: the controller's one claim write, a binding
        #: condition, ends the claim's part in its decisions (``binding`` skips a claim it patched).
        self.claims: Informer[ChannelClaim] | None = None
        if config.reads_claims:
            claim_indexers = {DOMAIN_INDEX: index_by_used_domain, DOMAIN_NODE_INDEX: index_by_pending_node}
            self.claims = watch(ChannelClaim, claim_indexers)
        self.daemon_set_view = Overlay([i.store for i in self.daemon_sets], domain_label)
        self.clique_view = Overlay([self.cliques.store] if self.cliques else [], domain_label)
        self.node_view = Overlay([self.nodes.store] if self.nodes else [], domain_label)
        follow(self.domains, self.domain_view)
        follow(self.templates, self.template_view)
        for ds_informer in self.daemon_sets:
            follow(ds_informer, self.daemon_set_view)
        if self.cliques is not None:
            follow(self.cliques, self.clique_view)
        if self.nodes is not None:
            follow(self.nodes, self.node_view)

    def synced(self) -> bool:
        """Whether every informer has completed its first LIST."""
        return all(informer.has_synced() for informer in self.informers)

    def domain_key(self, uid: str) -> str | None:
        """The ``namespace/name`` work-queue key of the domain with ``uid``, if it is cached."""
        keys = self.domains.store.index_keys(DOMAIN_INDEX, uid)
        return keys[0] if keys else None

    def terminating(self, key: str) -> bool:
        """Whether the domain under work-queue ``key`` is being deleted, as far as the overlay knows."""
        cd = self.domain_view.get(key)
        return cd is not None and self.domain_view.terminating(cd)

    def known_domains(self) -> set[str]:
        """UIDs of every cached ComputeDomain."""
        return {uid for cd in self.domains.store.objects() if (uid := own_uid(cd))}

    def daemon_pods(self, uid: str) -> list[DaemonPod]:
        """The domain's live daemon pods in every managed namespace (the only ones watched)."""
        pods = (
            daemon_pod(pod) for informer in self.pods for pod in informer.store.by_index(DOMAIN_INDEX, uid)
        )
        return [pod for pod in pods if pod is not None and pod.domain_uid == uid]

    def daemon_pods_on(self, uid: str, node: str) -> list[DaemonPod]:
        """The domain's live daemon pods on ``node`` (one, or two during a handover)."""
        key = domain_node(uid, node)
        pods = (
            daemon_pod(pod)
            for informer in self.pods
            for pod in informer.store.by_index(DOMAIN_NODE_INDEX, key)
        )
        return [pod for pod in pods if pod is not None and pod.domain_uid == uid and pod.node_name == node]

    def pending_claims_on(self, uid: str, node: str) -> list[ChannelClaim]:
        """The claims awaiting a binding decision for domain ``uid`` on ``node``."""
        if self.claims is None:
            return []
        return self.claims.store.by_index(DOMAIN_NODE_INDEX, domain_node(uid, node))

    def channel_users(self, home: Home) -> list[str]:
        """``namespace/name`` of every pod a claim of the domain's namespace on its channel is reserved for.

        A claim of another namespace naming the domain never prepares (the kubelet plugin refuses it),
        so it does not hold the domain (docs/tenancy.md).
        """
        if self.claims is None:
            return []
        claims = self.claims.store.by_index(DOMAIN_INDEX, home.uid)
        return sorted(
            {
                pod
                for claim in claims
                if claim.use is not None and claim.metadata and claim.metadata.namespace == home.namespace
                for pod in claim.use.pods
            }
        )

    def templates_of(self, home: Home, target: ClaimTemplateTarget) -> list[ResourceClaimTemplate]:
        """The domain's claim templates of the given target, in their place."""
        kind = _TEMPLATE_KINDS[target.value]
        return [
            t
            for t in self.template_view.by_domain(home.uid)
            if template_kind(t) is kind and self._placed(kind, home, t)
        ]

    def daemon_sets_of(self, home: Home) -> list[DaemonSetMeta]:
        """The domain's DaemonSet (one, or one per managed namespace after a move), in its place."""
        return [
            ds for ds in self.daemon_set_view.by_domain(home.uid) if self._placed(Kind.DAEMON_SET, home, ds)
        ]

    def cliques_of(self, home: Home) -> list[ComputeDomainClique]:
        """The domain's cliques, in their place."""
        return [c for c in self.clique_view.by_domain(home.uid) if self._placed(Kind.CLIQUE, home, c)]

    def lookalikes(self, home: Home) -> list[KubeObject]:
        """Objects carrying the domain's label outside its place (never acted on; reported once)."""
        found: list[KubeObject] = []
        for template in self.template_view.by_domain(home.uid):
            kind = template_kind(template)
            if kind is None or not self._placed(kind, home, template):
                found.append(template)
        found += [
            ds
            for ds in self.daemon_set_view.by_domain(home.uid)
            if not self._placed(Kind.DAEMON_SET, home, ds)
        ]
        found += [c for c in self.clique_view.by_domain(home.uid) if not self._placed(Kind.CLIQUE, home, c)]
        return found

    def _placed(self, kind: Kind, home: Home, obj: KubeObject) -> bool:
        meta = obj.metadata
        return meta is not None and self.places.holds(kind, home, meta.namespace or "", meta.name or "")


def follow(informer: Informer[T], overlay: Overlay[T]) -> None:
    """Let ``overlay`` drop recorded writes of objects the informer saw deleted."""
    informer.add_handler(EventHandler(on_delete=overlay.observe_deleted))
