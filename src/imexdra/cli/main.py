"""Entry point of ``imexdra``."""

import sys
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

import click

COMMAND_GROUP = "imexdra.commands"
"""Entry-point group through which another installed distribution adds commands (``imexdra demo`` comes
from the repository's imexdra-sim this way; docs/architecture.md §2.3)."""


class _Commands(click.Group):
    """The built-in commands, then those registered under ``COMMAND_GROUP`` by installed distributions.

    A registered command is imported only when it is asked for or listed, so the read-only commands
    never load a plugin; a registered name never replaces a built-in one.
    """

    @staticmethod
    def _registered() -> dict[str, EntryPoint]:
        return {point.name: point for point in entry_points(group=COMMAND_GROUP)}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self._registered()})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        if command is not None:
            return command
        point = self._registered().get(cmd_name)
        if point is None:
            return None
        loaded = point.load()
        if not isinstance(loaded, click.Command):
            raise click.ClickException(f"{point.value} (entry point {cmd_name!r}) is not a click command")
        return loaded


@click.group(name="imexdra", cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Operate and demonstrate the imexdra ComputeDomain driver."""


_KUBECONFIG_HELP = "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, else in-cluster credentials)"
_DRIVER_NAMESPACE_HELP = "namespace the driver runs in (daemon DaemonSets and ComputeDomainCliques)"


@main.command("status")
@click.option("--kubeconfig", type=click.Path(dir_okay=False, path_type=Path), help=_KUBECONFIG_HELP)
@click.option("-n", "--namespace", help="only ComputeDomains and channels of this namespace")
@click.option("-A", "--all-namespaces", is_flag=True, help="all namespaces (the default without -n)")
@click.option("--driver-namespace", default="imexdra", show_default=True, help=_DRIVER_NAMESPACE_HELP)
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True)
def status(
    kubeconfig: Path | None, namespace: str | None, all_namespaces: bool, driver_namespace: str, output: str
) -> None:
    """Show ComputeDomains, their cliques, GPU nodes and prepared IMEX channels (read-only)."""
    import json

    from imexdra.cli.clusterview import run_with_client
    from imexdra.cli.status import build_report, fetch_snapshot, render_text

    if namespace is not None and all_namespaces:
        raise click.UsageError("-n/--namespace and -A/--all-namespaces are mutually exclusive")
    snapshot = run_with_client(
        kubeconfig,
        lambda client: fetch_snapshot(client, namespace=namespace, driver_namespace=driver_namespace),
    )
    report = build_report(snapshot)
    click.echo(json.dumps(report, indent=2, sort_keys=True) if output == "json" else render_text(report))


@main.command("diagnose")
@click.argument("domain", metavar="[NAMESPACE/]DOMAIN")
@click.option("--kubeconfig", type=click.Path(dir_okay=False, path_type=Path), help=_KUBECONFIG_HELP)
@click.option("-n", "--namespace", help="namespace of DOMAIN  [default: default]")
@click.option("--driver-namespace", default="imexdra", show_default=True, help=_DRIVER_NAMESPACE_HELP)
@click.option(
    "--imex-mode",
    type=click.Choice(["auto", "driver-managed", "host-managed"]),
    default="auto",
    show_default=True,
    help="auto reads it from the installed DeviceClasses",
)
@click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text", show_default=True)
def diagnose(
    domain: str,
    kubeconfig: Path | None,
    namespace: str | None,
    driver_namespace: str,
    imex_mode: str,
    output: str,
) -> None:
    """Explain why a ComputeDomain or its pods are not ready.

    Exit code 0: no problem found; 1: problems found; 2: the domain does not exist; 3: the cluster
    could not be read.
    """
    import json

    from imexdra.cli import diagnose as checks
    from imexdra.cli.clusterview import ImexMode, run_with_client

    if "/" in domain:
        given_namespace, _, name = domain.partition("/")
        if namespace is not None and namespace != given_namespace:
            raise click.UsageError(f"{domain} contradicts -n {namespace}")
        namespace = given_namespace
    else:
        name = domain
    namespace = namespace or "default"
    mode = None if imex_mode == "auto" else ImexMode(imex_mode)
    view = run_with_client(
        kubeconfig,
        lambda client: checks.fetch_view(
            client, namespace=namespace, name=name, driver_namespace=driver_namespace, imex_mode=mode
        ),
    )
    findings = checks.diagnose(view) if view is not None else [checks.missing_domain_finding(namespace, name)]
    key = f"{namespace}/{name}"
    if output == "json":
        document = {
            "computeDomain": key,
            "found": view is not None,
            "imexMode": str(view.imex_mode) if view is not None else None,
            "problems": checks.has_problems(findings),
            "findings": [f.to_json() for f in findings],
        }
        click.echo(json.dumps(document, indent=2, sort_keys=True))
    else:
        click.echo(checks.render_text(key, findings))
    sys.exit(2 if view is None else 1 if checks.has_problems(findings) else 0)
