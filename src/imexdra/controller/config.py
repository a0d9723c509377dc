"""The controller's effective configuration, resolved once from the command-line settings.

Upstream hands one "bag" of twelve fields to every manager; here the bag is a frozen dataclass whose
fields say which component reads them, and the derived facts (which namespaces
hold daemon objects, whether cliques are in use) are computed once instead of at every call site.
"""

from __future__ import annotations

from dataclasses import dataclass

from imexdra.api.featuregates import FeatureGates, Gate
from imexdra.api.flags.common import DEFAULT_IMEX_CHANNEL_COUNT, ImexIsolation, ImexSettings, LogFormat
from imexdra.api.flags.controller import ControllerSettings
from imexdra.api.flags.daemon import DEFAULT_IMEX_PEERS_POLL_INTERVAL
from imexdra.api.imexmode import ImexManagement, choose_imex_mode

#: Field manager and Event ``reportingController`` of every write the controller makes.
CONTROLLER_NAME = "compute-domain.nvidia.com/controller"

#: Batching window for daemon-pod and clique events of one domain: a burst of daemons starting within
#: this window costs one clique write and one status write (no N-writer storms, docs/architecture.md §5).
DEFAULT_DEBOUNCE_SECONDS = 0.15

#: Least time between two membership publications (clique and status writes) of one domain: while
#: daemons keep starting, their changes are gathered into one write per interval (upstream: 2 s sync).
DEFAULT_MIN_PUBLISH_INTERVAL_SECONDS = 0.5

#: Least time between two status writes that only restate what the cliques already publish (a fabric
#: node's entry in ``status.nodes``): with cliques on, the status is the roll-up, not the readiness
#: source, and each write of a big domain's status goes to every node's plugin (docs/architecture.md §5.1;
#: upstream copies cliques into the status every 2 s).
DEFAULT_STATUS_ROLLUP_INTERVAL_SECONDS = 2.0

#: Informer resync and stale-object sweep period (upstream: 10 minutes for both).
DEFAULT_RESYNC_SECONDS = 600.0


@dataclass(frozen=True, slots=True)
class ControllerConfig:
    """Everything the controller's parts need to know about the install."""

    #: Where daemon DaemonSets, daemon claim templates and cliques are created.
    driver_namespace: str
    #: The driver namespace first, then ``--additional-namespaces`` (de-duplicated): daemon objects in
    #: any of them are found, finalized and cleaned up, new ones only ever go to the driver namespace.
    managed_namespaces: tuple[str, ...]
    pod_name: str
    image_name: str
    image_pull_secrets: tuple[str, ...]
    daemon_log_verbosity: int
    max_nodes_per_imex_domain: int
    feature_gates: FeatureGates
    #: Who runs nvidia-imex (``imexdra.api.imexmode``); HostManagedIMEX: only the workload claim
    #: template, no daemons, cliques, node labels or status sync.
    imex_mode: ImexManagement
    #: ``channel`` gives each domain its own IMEX channel (docs/channel-isolation.md); host-managed only.
    imex_isolation: ImexIsolation = ImexIsolation.DOMAIN
    #: Channels ``0 .. count - 1`` on every node (docs/channel-isolation.md §3); channel isolation only.
    imex_channel_count: int = DEFAULT_IMEX_CHANNEL_COUNT
    #: A deleted domain waits for the pods using its channel (docs/in-use-protection.md).
    in_use_protection: bool = True
    #: Most domains of one namespace admitted at once, 0 = no bound (``quota``, docs/tenancy.md).
    max_compute_domains_per_namespace: int = 0
    #: Each driver-managed domain gets a NetworkPolicy for its daemons (``netpolicy``, docs/tenancy.md).
    daemon_network_policy: bool = True
    #: The controller's own ``--logging-format``, handed to the daemons so one install logs one way.
    daemon_logging_format: LogFormat = LogFormat.TEXT
    #: The daemons' ``IMEX_PEERS_POLL_INTERVAL`` (docs/imex-health.md §3); 0: they do not report.
    daemon_imex_peers_poll_interval: float = DEFAULT_IMEX_PEERS_POLL_INTERVAL
    debounce_seconds: float = DEFAULT_DEBOUNCE_SECONDS
    min_publish_interval: float = DEFAULT_MIN_PUBLISH_INTERVAL_SECONDS
    status_rollup_interval: float = DEFAULT_STATUS_ROLLUP_INTERVAL_SECONDS
    resync_seconds: float = DEFAULT_RESYNC_SECONDS
    #: Reconciles in flight at once (one per domain at most); they mostly wait on the API server.
    workers: int = 48

    @property
    def cliques_enabled(self) -> bool:
        """Whether daemon membership is published in ComputeDomainClique objects (else in CD status)."""
        return self.imex_mode.cliques_enabled(self.feature_gates)

    @classmethod
    def from_settings(
        cls,
        *,
        namespace: str,
        controller: ControllerSettings,
        imex: ImexSettings,
        feature_gates: FeatureGates,
        logging_format: LogFormat = LogFormat.TEXT,
    ) -> ControllerConfig:
        """Combine the option groups; ``ConfigError`` for hostManaged without the gate or a bad isolation."""
        namespaces = tuple(dict.fromkeys((namespace, *controller.additional_namespaces)))
        imex_mode = choose_imex_mode(imex, feature_gates)
        return cls(
            driver_namespace=namespace,
            managed_namespaces=namespaces,
            pod_name=controller.pod_name,
            image_name=controller.image_name,
            image_pull_secrets=controller.cd_daemon_image_pull_secret_names,
            daemon_log_verbosity=controller.log_verbosity_cd_daemon,
            max_nodes_per_imex_domain=controller.max_nodes_per_imex_domain,
            feature_gates=feature_gates,
            imex_mode=imex_mode,
            imex_isolation=imex_mode.admit_isolation(imex.imex_isolation),
            imex_channel_count=imex.imex_channel_count,
            in_use_protection=controller.compute_domain_in_use_protection,
            max_compute_domains_per_namespace=controller.max_compute_domains_per_namespace,
            daemon_network_policy=controller.compute_domain_daemon_network_policy,
            daemon_logging_format=logging_format,
            daemon_imex_peers_poll_interval=controller.cd_daemon_imex_peers_poll_interval,
        )

    @property
    def writes_network_policies(self) -> bool:
        """Whether the controller makes daemon NetworkPolicies (driver-managed mode, option on)."""
        return self.daemon_network_policy and self.imex_mode.runs_imex_daemons

    @property
    def binding_conditions(self) -> bool:
        """Whether the controller decides our channel devices' binding conditions (``binding``)."""
        return self.feature_gates.enabled(Gate.COMPUTE_DOMAIN_BINDING_CONDITIONS)

    @property
    def reads_claims(self) -> bool:
        """Whether the controller watches ResourceClaims (held channels, the pods using them, bindings)."""
        return (
            self.imex_isolation is ImexIsolation.CHANNEL or self.in_use_protection or self.binding_conditions
        )
