"""Options only the compute-domain daemon takes: its pod and the ComputeDomain it serves.

Names and variables are upstream's (docs/compatibility.md §2.8). The pod fields come from the
DaemonSet's downward API; ``CLIQUE_ID`` and the ``COMPUTE_DOMAIN_*`` variables are injected through
CDI by the kubelet plugin, so they are optional here (``check`` runs without them) and the ``run``
command decides what it needs.
"""

from __future__ import annotations

from dataclasses import dataclass

import click

from imexdra.api.constants import DEFAULT_MAX_NODES_PER_IMEX_DOMAIN
from imexdra.api.flags.groups import OptionGroup, check_dns_label, check_ip, option

#: How often a daemon reads ``nvidia-imex-ctl -N`` by default (docs/imex-health.md).
DEFAULT_IMEX_PEERS_POLL_INTERVAL = 10.0


@dataclass(frozen=True, slots=True)
class DaemonSettings:
    """Who the daemon is and which ComputeDomain and clique it joins (``""``: not provided)."""

    #: ``<clusterUUID>.<cliqueId>``; empty on a node without an NVLink fabric.
    clique_id: str
    compute_domain_uuid: str
    compute_domain_name: str
    compute_domain_namespace: str
    pod_ip: str
    pod_uid: str
    pod_name: str
    pod_namespace: str
    max_nodes_per_imex_domain: int
    #: Seconds between two reads of IMEX's connectivity table (ours; 0: do not report IMEX peers).
    imex_peers_poll_interval: float = DEFAULT_IMEX_PEERS_POLL_INTERVAL

    def __post_init__(self) -> None:
        """Check the values the daemon writes into its clique entry and uses as namespaces."""
        if self.pod_ip:
            check_ip(self.pod_ip, field="pod_ip")
        check_dns_label(self.compute_domain_namespace, field="compute_domain_namespace")
        if self.pod_namespace:
            check_dns_label(self.pod_namespace, field="pod_namespace")


daemon_options = OptionGroup(
    "daemon",
    DaemonSettings,
    option("--cliqueid", "clique_id", envvar="CLIQUE_ID", default="", help="IMEX clique of this node."),
    option(
        "--compute-domain-uuid",
        envvar="COMPUTE_DOMAIN_UUID",
        default="",
        help="UID of the ComputeDomain (injected through CDI).",
    ),
    option("--compute-domain-name", envvar="COMPUTE_DOMAIN_NAME", default="", help="ComputeDomain name."),
    option(
        "--compute-domain-namespace",
        envvar="COMPUTE_DOMAIN_NAMESPACE",
        default="default",
        help="ComputeDomain namespace.",
    ),
    option("--pod-ip", envvar="POD_IP", default="", help="This pod's IP (the IMEX bind address)."),
    option("--pod-uid", envvar="POD_UID", default="", help="This pod's UID (clique owner reference)."),
    option("--pod-name", envvar="POD_NAME", default="", help="This pod's name."),
    option("--pod-namespace", envvar="POD_NAMESPACE", default="", help="This pod's namespace."),
    option(
        "--max-nodes-per-imex-domain",
        envvar="MAX_NODES_PER_IMEX_DOMAIN",
        type=click.IntRange(min=1),
        default=DEFAULT_MAX_NODES_PER_IMEX_DOMAIN,
        help="Most daemons one IMEX domain (clique) can hold; sizes the DNS-name table.",
    ),
    option(
        "--imex-peers-poll-interval",
        envvar="IMEX_PEERS_POLL_INTERVAL",
        type=click.FloatRange(min=0),
        default=DEFAULT_IMEX_PEERS_POLL_INTERVAL,
        help="Seconds between reads of IMEX's peer connections (nvidia-imex-ctl -N); 0 turns the report off.",
    ),
)
