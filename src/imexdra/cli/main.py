"""Entry point of ``imexdra``."""

import sys
from pathlib import Path
from typing import Literal

import click


@click.group(name="imexdra", context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Operate and demonstrate the imexdra ComputeDomain driver."""


@main.command("demo")
@click.option("--nodes", default=4, show_default=True, help="simulated GB200 nodes (18 = a full NVL72 rack)")
@click.option("--host-managed", is_flag=True, help="install with featureGates.HostManagedIMEX=true")
@click.option("--keep", is_flag=True, help="leave the cluster running at the end")
@click.option(
    "--runtime",
    type=click.Choice(["containerd", "fakecri"]),
    default="containerd",
    show_default=True,
    help="containerd: real containers of the project's image; fakecri: pods as host processes",
)
def demo(nodes: int, host_managed: bool, keep: bool, runtime: Literal["containerd", "fakecri"]) -> None:
    """Run the seed's MPIJob with a ComputeDomain on a simulated NVL72 rack."""
    # Imported here: the local cluster needs the development extras (cryptography) and the Go-built
    # binaries, which an installed driver does not have; `imexdra --help` must work without them.
    from imexdra.cli.demo import run_demo
    from imexdra.cli.rack import RackConfig

    run_demo(RackConfig(nodes=nodes, host_managed=host_managed, runtime=runtime), keep=keep)


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
