"""Options only the controller takes: its identity, the daemon it renders, and leader election.

Names, variables and defaults are upstream's (docs/compatibility.md §2.8), including the lease name
default that the chart overrides and the Go duration syntax of the leader-election timings.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import click

from imexdra.api.constants import DEFAULT_MAX_NODES_PER_IMEX_DOMAIN
from imexdra.api.flags.daemon import DEFAULT_IMEX_PEERS_POLL_INTERVAL
from imexdra.api.flags.groups import (
    CommaSeparated,
    GoDuration,
    OptionGroup,
    check_dns_label,
    check_dns_subdomain,
    option,
)
from imexdra.common.errors import ConfigError

# client-go's leader elector requires renewDeadline > JitterFactor * retryPeriod.
_LEADER_ELECTION_JITTER_FACTOR = 1.2


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    """The controller's pod, and what it renders into each ComputeDomain's daemon DaemonSet."""

    pod_name: str
    image_name: str
    cd_daemon_image_pull_secret_names: tuple[str, ...]
    log_verbosity_cd_daemon: int
    max_nodes_per_imex_domain: int
    #: Namespaces besides the driver's where daemon DaemonSets may be left from older installs.
    additional_namespaces: tuple[str, ...]
    #: Keep a deleted domain (Terminating) while pods use its channel (docs/in-use-protection.md).
    compute_domain_in_use_protection: bool = True
    #: Most ComputeDomains of one namespace given their objects (and channel) at once; 0 = no bound
    #: (docs/tenancy.md, "Quotas"). Ours: upstream has no such flag.
    max_compute_domains_per_namespace: int = 0
    #: Give each domain's IMEX daemons a NetworkPolicy admitting only each other (docs/tenancy.md).
    compute_domain_daemon_network_policy: bool = True
    #: The daemons' ``IMEX_PEERS_POLL_INTERVAL`` (docs/imex-health.md §3). Ours: upstream has no such flag.
    cd_daemon_imex_peers_poll_interval: float = DEFAULT_IMEX_PEERS_POLL_INTERVAL

    def __post_init__(self) -> None:
        """Check the names the controller will write into objects."""
        check_dns_subdomain(self.pod_name, field="pod_name")
        if not self.image_name.strip():
            raise ConfigError("must not be empty", field="image_name")
        for secret in self.cd_daemon_image_pull_secret_names:
            check_dns_subdomain(secret, field="cd_daemon_image_pull_secret_names")
        for namespace in self.additional_namespaces:
            check_dns_label(namespace, field="additional_namespaces")


controller_options = OptionGroup(
    "controller",
    ControllerSettings,
    option("--pod-name", envvar="POD_NAME", required=True, help="This pod's name (leader identity)."),
    option("--image-name", envvar="IMAGE_NAME", required=True, help="Image of the IMEX daemon pods."),
    option(
        "--cd-daemon-image-pull-secret-names",
        envvar="CD_DAEMON_IMAGE_PULL_SECRET_NAMES",
        type=CommaSeparated(),
        default=(),
        help="Image pull secrets for the daemon pods (comma-separated).",
    ),
    option(
        "--log-verbosity-cd-daemon",
        envvar="LOG_VERBOSITY_CD_DAEMON",
        type=click.IntRange(min=0),
        required=True,
        help="Log verbosity of the daemon pods.",
    ),
    option(
        "--max-nodes-per-imex-domain",
        envvar="MAX_NODES_PER_IMEX_DOMAIN",
        type=click.IntRange(min=1),
        default=DEFAULT_MAX_NODES_PER_IMEX_DOMAIN,
        help="Most daemons one IMEX domain (clique) can hold.",
    ),
    option(
        "--additional-namespaces",
        envvar="ADDITIONAL_NAMESPACES",
        type=CommaSeparated(),
        default=(),
        help="Other namespaces to clean daemon DaemonSets from (comma-separated).",
    ),
    option(
        "--compute-domain-in-use-protection",
        envvar="COMPUTE_DOMAIN_IN_USE_PROTECTION",
        # A Go-style boolean: bare flag is true, ``=false`` turns it off (upstream's immediate teardown).
        type=click.BOOL,
        is_flag=False,
        flag_value=True,
        default=True,
        help="Keep a deleted ComputeDomain while pods use its channel (false: tear down at once).",
    ),
    option(
        "--max-compute-domains-per-namespace",
        envvar="MAX_COMPUTE_DOMAINS_PER_NAMESPACE",
        type=click.IntRange(min=0),
        default=0,
        help="Most ComputeDomains of one namespace that get a claim template (and channel); "
        "the rest wait NotReady in creation order. 0: no bound.",
    ),
    option(
        "--compute-domain-daemon-network-policy",
        envvar="COMPUTE_DOMAIN_DAEMON_NETWORK_POLICY",
        type=click.BOOL,
        is_flag=False,
        flag_value=True,
        default=True,
        help="Create a NetworkPolicy per ComputeDomain: its IMEX daemons accept IMEX traffic from each "
        "other only (false: none, as upstream).",
    ),
    option(
        "--cd-daemon-imex-peers-poll-interval",
        envvar="CD_DAEMON_IMEX_PEERS_POLL_INTERVAL",
        type=click.FloatRange(min=0),
        default=DEFAULT_IMEX_PEERS_POLL_INTERVAL,
        help="Seconds between the daemons' reads of IMEX's peer connections (their "
        "IMEX_PEERS_POLL_INTERVAL); 0 turns the report off.",
    ),
)


@dataclass(frozen=True, slots=True)
class LeaderElectionSettings:
    """Whether to elect a leader through a Lease, which one, and the client-go timings."""

    enabled: bool
    lease_lock_namespace: str
    lease_lock_name: str
    lease_duration: timedelta
    renew_deadline: timedelta
    retry_period: timedelta

    def __post_init__(self) -> None:
        """Apply client-go's checks on the lease object and the timings."""
        check_dns_label(self.lease_lock_namespace, field="lease_lock_namespace")
        check_dns_subdomain(self.lease_lock_name, field="lease_lock_name")
        if self.retry_period <= timedelta(0):
            raise ConfigError("must be positive", field="retry_period")
        if self.renew_deadline <= self.retry_period * _LEADER_ELECTION_JITTER_FACTOR:
            raise ConfigError(
                f"must be greater than {_LEADER_ELECTION_JITTER_FACTOR} x the retry period "
                f"({self.retry_period.total_seconds():g}s)",
                field="renew_deadline",
            )
        if self.lease_duration <= self.renew_deadline:
            raise ConfigError(
                f"must be greater than the renew deadline ({self.renew_deadline.total_seconds():g}s)",
                field="lease_duration",
            )


leader_election_options = OptionGroup(
    "leader_election",
    LeaderElectionSettings,
    option(
        "--leader-election-enabled",
        "enabled",
        envvar="LEADER_ELECTION_ENABLED",
        is_flag=True,
        default=False,
        help="Run only while holding the lease (for several replicas).",
    ),
    option(
        "--leader-election-lease-lock-namespace",
        "lease_lock_namespace",
        envvar="LEADER_ELECTION_LEASE_LOCK_NAMESPACE",
        default="default",
        help="Namespace of the Lease.",
    ),
    option(
        "--leader-election-lease-lock-name",
        "lease_lock_name",
        envvar="LEADER_ELECTION_LEASE_LOCK_NAME",
        default="nvidia-compute-domain-controller",
        help="Name of the Lease.",
    ),
    option(
        "--leader-election-lease-duration",
        "lease_duration",
        envvar="LEADER_ELECTION_LEASE_DURATION",
        type=GoDuration(),
        default="15s",
        help="How long a lease is valid without renewal.",
    ),
    option(
        "--leader-election-renew-deadline",
        "renew_deadline",
        envvar="LEADER_ELECTION_RENEW_DEADLINE",
        type=GoDuration(),
        default="10s",
        help="How long the leader keeps retrying to renew before giving up.",
    ),
    option(
        "--leader-election-retry-period",
        "retry_period",
        envvar="LEADER_ELECTION_RETRY_PERIOD",
        type=GoDuration(),
        default="2s",
        help="Wait between attempts to acquire or renew.",
    ),
)
