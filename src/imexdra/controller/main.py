"""Entry point of ``compute-domain-controller``: flags, logging, metrics server, leader election, run.

Flags and environment variables are upstream's (``imexdra.api.flags``). Startup logs the effective
feature gates (with HostManagedIMEX's forced overrides) and the controller configuration. With leader
election on, the controller runs only while this process holds the Lease; losing it ends the process
with exit code 1 so the next term starts clean (upstream does the same). SIGTERM/SIGINT end it with 0.
"""

from __future__ import annotations

import asyncio
import sys

import click
import structlog

from imexdra.api.featuregates import FeatureGates, log_feature_gates
from imexdra.api.flags.common import (
    ImexMode,
    ImexSettings,
    KubeClientSettings,
    LoggingSettings,
    MetricsSettings,
    feature_gate_options,
    imex_options,
    kube_client_options,
    logging_options,
    metrics_pprof_options,
    namespace_options,
)
from imexdra.api.flags.controller import (
    ControllerSettings,
    LeaderElectionSettings,
    controller_options,
    leader_election_options,
)
from imexdra.common.errors import ConfigError
from imexdra.common.kube.connection import connect
from imexdra.common.machinery.events import EventRecorder
from imexdra.common.machinery.leaderelection import (
    LeaderElectionConfig,
    LeaderElector,
    LeadershipLostError,
    new_identity,
)
from imexdra.common.observability.metrics import Probes, start_http_server
from imexdra.common.process.tasks import stop_on_signals, supervise
from imexdra.common.process.termination import write_termination_message
from imexdra.controller.config import CONTROLLER_NAME, ControllerConfig
from imexdra.controller.controller import Controller

_log = structlog.get_logger(__name__)


@click.command(name="compute-domain-controller", context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="imexdra")  # no -v alias: -v is klog's verbosity, as upstream's
@logging_options
@feature_gate_options
@kube_client_options
@metrics_pprof_options
@namespace_options
@controller_options
@leader_election_options
@imex_options
def main(
    logging: LoggingSettings,
    feature_gates: FeatureGates,
    kube_client: KubeClientSettings,
    metrics: MetricsSettings,
    namespace: str,
    controller: ControllerSettings,
    leader_election: LeaderElectionSettings,
    imex: ImexSettings,
) -> None:
    """The cluster-wide ComputeDomain controller."""
    logging.configure()
    log_feature_gates(feature_gates)
    try:
        config = ControllerConfig.from_settings(
            namespace=namespace,
            controller=controller,
            imex=imex,
            feature_gates=feature_gates,
            logging_format=logging.logging_format,
        )
    except ConfigError as error:
        raise click.UsageError(str(error)) from error
    _log.info(
        "controller manager config",
        klogVerbosity=logging.verbosity,
        namespace=config.driver_namespace,
        additionalNamespaces=list(config.managed_namespaces[1:]),
        imageName=config.image_name,
        maxNodesPerIMEXDomain=config.max_nodes_per_imex_domain,
        hostManagedIMEX=config.imex_mode.mode is ImexMode.HOST_MANAGED,
        imexIsolation=config.imex_isolation.value,
        imexChannelCount=config.imex_channel_count,
        maxComputeDomainsPerNamespace=config.max_compute_domains_per_namespace,
        computeDomainCliques=config.cliques_enabled,
        daemonNetworkPolicy=config.writes_network_policies,
        leaderElection=leader_election.enabled,
        kubeAPIQPS=kube_client.kube_api_qps,
        kubeAPIBurst=kube_client.kube_api_burst,
    )
    try:
        asyncio.run(run(config, kube_client, metrics, leader_election))
    except ConfigError as error:  # e.g. an unusable kubeconfig
        write_termination_message(str(error))
        raise click.ClickException(str(error)) from error
    except LeadershipLostError as error:
        _log.error("leaderelection lost", error=str(error))
        write_termination_message(f"leadership lost: {error}")
        sys.exit(1)


async def run(
    config: ControllerConfig,
    kube_client: KubeClientSettings,
    metrics: MetricsSettings,
    leader_election: LeaderElectionSettings,
) -> None:
    """Serve metrics and probes, and run the controller (under leader election if enabled) until stopped."""
    stop = stop_on_signals()
    # One client: the informers, Events, the Lease and every write share one transport and QPS bucket.
    connection = connect(
        kube_client.kubeconfig, qps=kube_client.kube_api_qps, burst=kube_client.kube_api_burst
    )
    client = connection.kube(field_manager=CONTROLLER_NAME)
    events = EventRecorder(client, controller=CONTROLLER_NAME, instance=config.pod_name)
    controller = Controller(client, config, events)
    probes = Probes()
    probes.add_readiness("controller", controller.synced)
    server = None
    if metrics.listen_address is not None:
        host, port = metrics.listen_address
        server = await start_http_server(
            host, port, probes=probes, metrics_path=metrics.metrics_path, pprof_path=metrics.pprof_path
        )
        _log.info(
            "Serving metrics",
            endpoint=metrics.http_endpoint,
            path=metrics.metrics_path,
            pprofPath=metrics.pprof_path,
        )
    try:
        if leader_election.enabled:
            elector = LeaderElector(
                client,
                LeaderElectionConfig(
                    name=leader_election.lease_lock_name,
                    namespace=leader_election.lease_lock_namespace,
                    identity=new_identity(config.pod_name),
                    lease_duration=leader_election.lease_duration.total_seconds(),
                    renew_deadline=leader_election.renew_deadline.total_seconds(),
                    retry_period=leader_election.retry_period.total_seconds(),
                ),
            )
            await supervise({"controller": elector.run(controller.run)}, stop=stop)
        else:
            await supervise({"controller": controller.run()}, stop=stop)
    finally:
        if server is not None:
            server.close()
        client.close()
