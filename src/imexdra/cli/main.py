"""Entry point of ``imexdra``."""

import click


@click.group(name="imexdra", context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Operate and demonstrate the imexdra ComputeDomain driver."""


@main.command("demo")
@click.option("--nodes", default=4, show_default=True, help="simulated GB200 nodes (18 = a full NVL72 rack)")
@click.option("--host-managed", is_flag=True, help="install with featureGates.HostManagedIMEX=true")
@click.option("--keep", is_flag=True, help="leave the cluster running at the end")
def demo(nodes: int, host_managed: bool, keep: bool) -> None:
    """Run the seed's MPIJob with a ComputeDomain on a simulated NVL72 rack."""
    # Imported here: the local cluster needs the development extras (cryptography) and the Go-built
    # binaries, which an installed driver does not have; `imexdra --help` must work without them.
    from imexdra.cli.demo import run_demo
    from imexdra.cli.rack import RackConfig

    run_demo(RackConfig(nodes=nodes, host_managed=host_managed), keep=keep)
