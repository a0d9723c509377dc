"""Entry point of ``imexdra``."""

from __future__ import annotations

import os
import sys
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:  # the commands import their modules when run, keeping --help and --version fast
    from imexdra.cli.status import Snapshot
    from imexdra.cli.targets import Target
    from imexdra.cli.workloads import WorkloadView
    from imexdra.common.kube.api import KubeApi

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
@click.version_option(package_name="imexdra", prog_name="imexdra")
@click.pass_context
def main(ctx: click.Context) -> None:
    """Operate and demonstrate the imexdra ComputeDomain driver.

    Conventions are kubectl's: --kubeconfig and --context pick the cluster, -n defaults to the
    context's namespace (diagnose), -o json|yaml|wide changes the output, NO_COLOR turns colour off
    (only added commands such as demo use it). Exit codes: 0 fine, 1 problems found (diagnose) or an
    error, 2 a usage error, 3 the cluster could not be read, 4 the object asked about does not exist.
    """
    if os.environ.get("NO_COLOR"):  # https://no-color.org: any non-empty value; commands inherit it
        ctx.color = False


_KUBECONFIG_HELP = "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, else in-cluster credentials)"
_CONTEXT_HELP = "kubeconfig context to use (default: the current context)"
_DRIVER_NAMESPACE_HELP = (
    "namespace the driver runs in (default: found from the install's kubelet-plugin DaemonSet)"
)
_OUTPUTS = ["text", "wide", "json", "yaml"]
_OUTPUT_HELP = "text tables (wide: with UIDs), or the whole report as json or yaml"


def _dump(document: object, output: str) -> str:
    """The report as JSON or YAML, keys sorted either way."""
    if output == "yaml":
        import yaml

        return yaml.safe_dump(document, sort_keys=True, default_flow_style=False).rstrip("\n")
    import json

    return json.dumps(document, indent=2, sort_keys=True)


@main.command("status")
@click.option("--kubeconfig", type=click.Path(dir_okay=False, path_type=Path), help=_KUBECONFIG_HELP)
@click.option("--context", help=_CONTEXT_HELP)
@click.option("-n", "--namespace", help="only ComputeDomains and channels of this namespace")
@click.option("-A", "--all-namespaces", is_flag=True, help="all namespaces (the default without -n)")
@click.option("--driver-namespace", help=_DRIVER_NAMESPACE_HELP)
@click.option(
    "-o", "--output", type=click.Choice(_OUTPUTS), default="text", show_default=True, help=_OUTPUT_HELP
)
def status(
    kubeconfig: Path | None,
    context: str | None,
    namespace: str | None,
    all_namespaces: bool,
    driver_namespace: str | None,
    output: str,
) -> None:
    """Show ComputeDomains, their cliques, GPU nodes and prepared IMEX channels (read-only).

    Unlike kubectl get, status covers all namespaces unless -n narrows it: it is a cluster overview.
    """
    from imexdra.cli.clusterview import find_driver_namespace, run_with_client
    from imexdra.cli.status import build_report, fetch_snapshot, render_text

    if namespace is not None and all_namespaces:
        raise click.UsageError("-n/--namespace and -A/--all-namespaces are mutually exclusive")

    async def fetch(client: KubeApi) -> Snapshot:
        driver = await find_driver_namespace(client, driver_namespace)
        return await fetch_snapshot(client, namespace=namespace, driver_namespace=driver)

    report = build_report(run_with_client(kubeconfig, fetch, context=context))
    text = render_text(report, wide=output == "wide") if output in ("text", "wide") else _dump(report, output)
    click.echo(text)


@main.command("diagnose")
@click.argument("target", metavar="[TARGET]", required=False)
@click.option("--kubeconfig", type=click.Path(dir_okay=False, path_type=Path), help=_KUBECONFIG_HELP)
@click.option("--context", help=_CONTEXT_HELP)
@click.option("-n", "--namespace", help="namespace of TARGET  [default: the context's namespace]")
@click.option("--all", "all_pods", is_flag=True, help="every pod of the namespace that uses a claim")
@click.option("--driver-namespace", help=_DRIVER_NAMESPACE_HELP + " (ComputeDomains only)")
@click.option(
    "--imex-mode",
    type=click.Choice(["auto", "driver-managed", "host-managed"]),
    default="auto",
    show_default=True,
    help="auto reads it from the installed DeviceClasses (ComputeDomains only)",
)
@click.option(
    "-o", "--output", type=click.Choice(_OUTPUTS), default="text", show_default=True, help=_OUTPUT_HELP
)
def diagnose(
    target: str | None,
    kubeconfig: Path | None,
    context: str | None,
    namespace: str | None,
    all_pods: bool,
    driver_namespace: str | None,
    imex_mode: str,
    output: str,
) -> None:
    """Explain why a ComputeDomain, or a workload's IMEX channel claim, is not ready.

    \b
    TARGET is kubectl's TYPE/NAME, or a ComputeDomain:
      NAME, NAMESPACE/NAME       a ComputeDomain (also computedomain/NAME)
      pod/NAME                   a pod's resourceClaims
      job/NAME, mpijob/NAME,     the workload's pods (its pod templates while
      deployment/NAME            it has none)
      namespace/NS, or --all     every pod of the namespace with an IMEX claim

    Exit code 0: no problem found; 1: problems found; 3: the cluster could not be read; 4: the target
    does not exist (2 stays click's usage error).
    """  # noqa: D301 -- \b is click's marker for a paragraph it must not rewrap
    from imexdra.cli.clusterview import context_namespace
    from imexdra.cli.targets import TargetKind, parse_target

    chosen = parse_target(
        target,
        namespace=namespace,
        all_pods=all_pods,
        default_namespace=lambda: context_namespace(kubeconfig, context),
    )
    if chosen.kind is TargetKind.COMPUTE_DOMAIN:
        code = _diagnose_domain(
            chosen,
            kubeconfig=kubeconfig,
            context=context,
            driver_namespace=driver_namespace,
            imex_mode=imex_mode,
            output=output,
        )
    else:
        code = _diagnose_workload(chosen, kubeconfig=kubeconfig, context=context, output=output)
    sys.exit(code)


def _diagnose_domain(
    target: Target,
    *,
    kubeconfig: Path | None,
    context: str | None,
    driver_namespace: str | None,
    imex_mode: str,
    output: str,
) -> int:
    """``diagnose`` of one ComputeDomain: print the report, return the exit code."""
    from imexdra.api.computedomain import ComputeDomain
    from imexdra.cli import diagnose as checks
    from imexdra.cli.clusterview import (
        EXIT_NOT_FOUND,
        EXIT_PROBLEMS,
        ImexMode,
        find_driver_namespace,
        get_or_none,
        run_with_client,
    )

    namespace, name = target.namespace, target.name
    mode = None if imex_mode == "auto" else ImexMode(imex_mode)

    async def fetch(client: KubeApi) -> checks.DomainView | None:
        # A missing domain is reported as such, whether or not the driver can be found.
        if await get_or_none(client, ComputeDomain, name, namespace) is None:
            return None
        driver = await find_driver_namespace(client, driver_namespace)
        return await checks.fetch_view(
            client, namespace=namespace, name=name, driver_namespace=driver, imex_mode=mode
        )

    view = run_with_client(kubeconfig, fetch, context=context)
    findings = checks.diagnose(view) if view is not None else [checks.missing_domain_finding(namespace, name)]
    key = f"{namespace}/{name}"
    if output in ("json", "yaml"):
        document = {
            "computeDomain": key,
            "found": view is not None,
            "imexMode": str(view.imex_mode) if view is not None else None,
            "problems": checks.has_problems(findings),
            "findings": [f.to_json() for f in findings],
        }
        click.echo(_dump(document, output))
    else:
        click.echo(checks.render_text(key, findings))
    return EXIT_NOT_FOUND if view is None else EXIT_PROBLEMS if checks.has_problems(findings) else 0


def _diagnose_workload(target: Target, *, kubeconfig: Path | None, context: str | None, output: str) -> int:
    """``diagnose`` of a pod, workload or namespace: print the report, return the exit code."""
    from imexdra.cli.claimchecks import diagnose_workload, missing_target_finding
    from imexdra.cli.clusterview import EXIT_NOT_FOUND, EXIT_PROBLEMS, run_with_client
    from imexdra.cli.diagnose import has_problems, render_text
    from imexdra.cli.workloads import fetch_workload_view

    async def fetch(client: KubeApi) -> WorkloadView | None:
        return await fetch_workload_view(client, target)

    view = run_with_client(kubeconfig, fetch, context=context)
    report = diagnose_workload(view) if view is not None else None
    findings = report.findings if report is not None else [missing_target_finding(target)]
    suggestions = report.suggestions if report is not None else []
    if output in ("json", "yaml"):
        document = {
            "target": target.ref,
            "kind": str(target.kind),
            "namespace": target.namespace,
            "name": target.name,
            "found": view is not None,
            "checked": report.checked if report is not None else [],
            "problems": has_problems(findings),
            "findings": [f.to_json() for f in findings],
            "suggestions": [s.to_json() for s in suggestions],
        }
        click.echo(_dump(document, output))
    else:
        blocks = [render_text(target.key, findings, kind=str(target.kind))]
        blocks += [f"# YAML that would work (template {s.template}):\n{s.to_yaml()}" for s in suggestions]
        click.echo("\n\n".join(block.rstrip("\n") for block in blocks))
    return EXIT_NOT_FOUND if view is None else EXIT_PROBLEMS if has_problems(findings) else 0
