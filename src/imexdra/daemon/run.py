"""``compute-domain-daemon run``: the daemon's whole life (docs/data-path.md §9.2, docs/architecture.md §5).

1. Check the CDI-injected identity (``COMPUTE_DOMAIN_UUID`` empty → upstream's CDI error).
2. Label its own pod with its clique ID (empty on a node without an NVLink fabric): the controller
   learns from that label, the pod's IP and its Ready condition everything it publishes.
3. Without a clique: run no IMEX, wait for SIGTERM (upstream's "noop mode"; ``check`` always passes).
   With one, the driver's ``nvidia-imex``/``nvidia-imex-ctl`` must be in the container (mounted by the
   base CDI spec, ``daemon.imexbinaries``); checked before any API call, a missing one fails the run.
4. Render ``imexd.cfg`` (and, in DNS-names mode, the static ``nodes.cfg``) into the IMEX directory.
5. Run its services until SIGTERM or a failure: the membership watcher (clique object, or the
   ComputeDomain status with ``ComputeDomainCliques`` off), the update loop (hosts file / node list,
   start / SIGUSR1 / restart), the IMEX supervisor, and (unless ``IMEX_PEERS_POLL_INTERVAL=0``) the
   peer-health reporter (``daemon.health``). On the way out IMEX gets SIGTERM.

The daemon writes nothing but its pod's clique label and IMEX-peers annotation; it does not remove
itself from its clique on shutdown (the controller drops a terminating pod at once). Unlike upstream,
a failure exits non-zero so the kubelet restarts the container (upstream exits 0 even after fatal
errors, docs/compatibility.md §3.3).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

import structlog

from imexdra.api.featuregates import FeatureGates, Gate
from imexdra.api.flags.common import KubeClientSettings
from imexdra.api.flags.daemon import DaemonSettings
from imexdra.common.errors import ConfigError
from imexdra.common.files.atomicfile import write_atomic
from imexdra.common.kube.api import KubeApi
from imexdra.common.kube.connection import make_client
from imexdra.common.process.tasks import stop_on_signals, supervise
from imexdra.daemon.health import PeerHealthReporter, pod_annotator
from imexdra.daemon.imexbinaries import ImexBinaries, find_imex_binaries
from imexdra.daemon.imexconfig import DEFAULT_TEMPLATE, dns_nodes_config, render_imex_config
from imexdra.daemon.membership import Identity
from imexdra.daemon.options import DaemonFiles
from imexdra.daemon.peers import watch_clique, watch_compute_domain
from imexdra.daemon.podlabel import label_own_pod
from imexdra.daemon.supervisor import ImexSupervisor
from imexdra.daemon.updater import Updater
from imexdra.devices.imex_real import SubprocessImex

_log = structlog.get_logger(__name__)

CDI_ERROR = "CDI container edits did not apply -- is CDI enabled in your container runtime?"
#: How long IMEX gets to exit after SIGTERM before SIGKILL (upstream's cleanup budget is 10 s).
IMEX_STOP_GRACE = 10.0


@dataclass(frozen=True, slots=True)
class RunConfig:
    """Everything ``run`` needs, from the command line and environment."""

    daemon: DaemonSettings
    node_name: str
    feature_gates: FeatureGates
    files: DaemonFiles
    kube_client: KubeClientSettings

    @property
    def dns_names(self) -> bool:
        """DNS-names mode (gate ``IMEXDaemonsWithDNSNames``) rather than IP mode."""
        return self.feature_gates.enabled(Gate.IMEX_DAEMONS_WITH_DNS_NAMES)

    @property
    def identity(self) -> Identity:
        """The daemon as membership entries name it."""
        d = self.daemon
        return Identity(self.node_name, d.pod_ip, d.clique_id, d.compute_domain_uuid)

    def validate(self) -> None:
        """Raise ``ConfigError`` for what ``run`` cannot do without."""
        d = self.daemon
        if not d.compute_domain_uuid:
            raise ConfigError(CDI_ERROR)
        for value, field in ((d.pod_name, "pod_name"), (d.pod_namespace, "pod_namespace")):
            if not value:
                raise ConfigError("must be set (downward API)", field=field)
        if d.clique_id and not d.pod_ip:
            raise ConfigError("must be set (downward API): it is the IMEX bind address", field="pod_ip")
        cliques = self.feature_gates.enabled(Gate.COMPUTE_DOMAIN_CLIQUES)
        if d.clique_id and not cliques and not d.compute_domain_name:
            raise ConfigError("must be set when ComputeDomainCliques is off", field="compute_domain_name")


def prepare_imexd(config: RunConfig) -> None:
    """Write ``imexd.cfg`` (and the static DNS ``nodes.cfg``); blocking."""
    paths = config.files.imexd
    paths.directory.mkdir(mode=0o755, parents=True, exist_ok=True)
    template = paths.template.read_text() if paths.template.exists() else DEFAULT_TEMPLATE
    rendered = render_imex_config(template, nodes_config_path=paths.nodes, cmd_bind_ip=config.daemon.pod_ip)
    write_atomic(paths.config, rendered.encode(), mode=0o644)
    if config.dns_names:
        nodes = dns_nodes_config(config.daemon.compute_domain_uuid, config.daemon.max_nodes_per_imex_domain)
        write_atomic(paths.nodes, nodes.encode(), mode=0o644)
    _log.info("IMEX config written", config=str(paths.config), template_found=paths.template.exists())


def imex_services(
    config: RunConfig, client: KubeApi, binaries: ImexBinaries
) -> dict[str, Coroutine[Any, Any, None]]:
    """The watcher, the update loop, the supervisor and the IMEX peer-health reporter, wired together."""
    me = config.identity
    d = config.daemon
    if config.feature_gates.enabled(Gate.COMPUTE_DOMAIN_CLIQUES):
        watcher: Any = watch_clique(client, me, namespace=d.pod_namespace)
    else:
        watcher = watch_compute_domain(
            client, me, name=d.compute_domain_name, namespace=d.compute_domain_namespace
        )
    files = config.files
    imex = SubprocessImex(files.imexd.config, imex_binary=binaries.imex, ctl_binary=binaries.ctl)
    supervisor = ImexSupervisor(imex, stop_grace=IMEX_STOP_GRACE)
    updater = Updater(
        paths=files.imexd,
        hosts_file=files.hosts_file,
        supervisor=supervisor,
        dns_names=config.dns_names,
        domain_uid=d.compute_domain_uuid,
        max_nodes=d.max_nodes_per_imex_domain,
    )
    services = {"peers": watcher.run(), "update": updater.run(watcher.memberships), "imex": supervisor.run()}
    if d.imex_peers_poll_interval > 0:
        reporter = PeerHealthReporter(
            read=imex.nodes,
            memberships=watcher.memberships,
            imex_pid=lambda: supervisor.pid,
            publish=pod_annotator(client, name=d.pod_name, namespace=d.pod_namespace),
            dns_names=config.dns_names,
            interval=d.imex_peers_poll_interval,
        )
        services["health"] = reporter.run()
    return services


async def _until_stopped(work: Coroutine[Any, Any, None], stop: asyncio.Event) -> bool:
    """Run ``work`` unless ``stop`` is set first; tell whether it completed."""
    task = asyncio.ensure_future(work)
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    if not task.done():
        task.cancel()
        return False
    task.result()
    return True


async def run_daemon(config: RunConfig) -> None:
    """The ``run`` subcommand; returns on SIGTERM/SIGINT, raises on failure."""
    config.validate()
    d = config.daemon
    binaries = find_imex_binaries() if d.clique_id else None
    if binaries is not None:
        _log.info("IMEX binaries found", nvidia_imex=binaries.imex, nvidia_imex_ctl=binaries.ctl)
    stop = stop_on_signals()
    client = make_client(
        field_manager="compute-domain-daemon",
        kubeconfig=config.kube_client.kubeconfig,
        qps=config.kube_client.kube_api_qps,
        burst=config.kube_client.kube_api_burst,
    )
    try:
        labelled = label_own_pod(client, name=d.pod_name, namespace=d.pod_namespace, clique_id=d.clique_id)
        if not await _until_stopped(labelled, stop):
            return
        if binaries is None:
            _log.info(
                "No clique ID: non-fabric noop mode",
                reason="clique ID is empty: this node runs no IMEX daemon",
            )
            await stop.wait()
            return
        await asyncio.to_thread(prepare_imexd, config)
        await supervise(imex_services(config, client, binaries), stop=stop, grace=IMEX_STOP_GRACE + 5.0)
    finally:
        client.close()
    _log.info("Exiting")
