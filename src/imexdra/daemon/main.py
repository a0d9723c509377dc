"""Entry point of ``compute-domain-daemon``: global flags, then ``run`` or ``check``.

Global flags precede the subcommand, as upstream's (``compute-domain-daemon -v $(LOG_VERBOSITY) run``);
every flag has its upstream environment variable (docs/compatibility.md §2.8), plus ``--kubeconfig``
and the client rate limits (unset: in-cluster config, client-go's 5 QPS / burst 10) and the file
locations of ``daemon.options``. ``check`` is run by the kubelet as a probe (every second while the
pod starts), so it loads nothing it does not need: no API client, no structured logging (it prints its
verdict, as upstream's does).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import click

from imexdra.api.featuregates import FeatureGates
from imexdra.api.flags.common import (
    KubeClientSettings,
    LoggingSettings,
    feature_gate_options,
    kube_client_options,
    logging_options,
    node_name_options,
)
from imexdra.api.flags.daemon import DaemonSettings, daemon_options
from imexdra.daemon.options import DaemonFiles, daemon_file_options


@dataclass(frozen=True, slots=True)
class GlobalSettings:
    """The global flags, handed to the subcommands."""

    daemon: DaemonSettings
    node_name: str
    feature_gates: FeatureGates
    files: DaemonFiles
    kube_client: KubeClientSettings
    logging: LoggingSettings


class _Group(click.Group):
    """Shows a subcommand's help even when required global flags are missing.

    The global flags are parsed before the subcommand, so ``compute-domain-daemon run --help`` would
    otherwise fail on a missing ``--node-name`` instead of explaining ``run``.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Answer ``<subcommand> --help`` at once; parse everything else as usual."""
        for position, arg in enumerate(args):
            command = self.commands.get(arg)
            if command is not None and {"-h", "--help"} & set(args[position + 1 :]):
                command.make_context(arg, ["--help"], parent=ctx)  # prints the help and exits
        return super().parse_args(ctx, args)


@click.group(
    name="compute-domain-daemon", cls=_Group, context_settings={"help_option_names": ["-h", "--help"]}
)
@click.version_option(package_name="imexdra")  # no -v alias: -v is klog's verbosity, as upstream's
@logging_options
@feature_gate_options
@daemon_options
@node_name_options
@daemon_file_options
@kube_client_options
@click.pass_context
def main(
    ctx: click.Context,
    logging: LoggingSettings,
    feature_gates: FeatureGates,
    daemon: DaemonSettings,
    node_name: str,
    files: DaemonFiles,
    kube_client: KubeClientSettings,
) -> None:
    """The per-node, per-domain supervisor of nvidia-imex."""
    ctx.obj = GlobalSettings(daemon, node_name, feature_gates, files, kube_client, logging)


@main.command()
@click.pass_obj
def run(settings: GlobalSettings) -> None:
    """Join the ComputeDomain and supervise nvidia-imex until SIGTERM."""
    from imexdra.common.process.init import stay_init_if_pid1

    # First, before anything is loaded or started: as the container's PID 1 the daemon leaves a
    # minimal init behind that reaps the orphans of timed-out probes (docs/data-path.md §9.5).
    stay_init_if_pid1()
    # The event loop, the API client and logging stacks are loaded here only, keeping ``check`` light.
    import asyncio

    import structlog

    from imexdra.api.featuregates import log_feature_gates
    from imexdra.common.errors import DriverError
    from imexdra.common.process.termination import write_termination_message
    from imexdra.daemon.run import RunConfig, run_daemon

    settings.logging.configure()
    log_feature_gates(settings.feature_gates)
    _log = structlog.get_logger(__name__)
    _log.info(
        "Starting compute-domain daemon",
        klogVerbosity=settings.logging.verbosity,
        node=settings.node_name,
        clique_id=settings.daemon.clique_id,
        compute_domain=settings.daemon.compute_domain_uuid,
        pod=f"{settings.daemon.pod_namespace}/{settings.daemon.pod_name}",
        pod_ip=settings.daemon.pod_ip,
        imexd_dir=str(settings.files.imexd_dir),
        hosts_file=str(settings.files.hosts_file),
    )
    config = RunConfig(
        daemon=settings.daemon,
        node_name=settings.node_name,
        feature_gates=settings.feature_gates,
        files=settings.files,
        kube_client=settings.kube_client,
    )
    try:
        asyncio.run(run_daemon(config))
    except DriverError as error:
        _log.error("Daemon failed", error=str(error))
        write_termination_message(str(error))
        sys.exit(1)
    except Exception:  # anything else is a bug: log it with its traceback, let the kubelet restart us
        _log.exception("Daemon failed")
        sys.exit(1)


@main.command()
@click.pass_obj
def check(settings: GlobalSettings) -> None:
    """Exit 0 when this node's IMEX daemon is ready (the pod's probe)."""
    from imexdra.daemon.check import check as run_check
    from imexdra.daemon.imexbinaries import locate
    from imexdra.devices.imexctl import query_daemon

    # Found as ``run`` finds it (/usr/bin first); a missing one makes the query fail, naming it.
    ctl = locate("nvidia-imex-ctl") or "nvidia-imex-ctl"
    config = settings.files.imexd.config
    result = run_check(lambda: query_daemon(ctl, config), clique_id=settings.daemon.clique_id)
    if result.message:
        click.echo(result.message, err=not result.ok)
    if not result.ok:
        sys.exit(1)
