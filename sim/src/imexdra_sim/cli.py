"""``imexdra demo``: the command this package adds to the ``imexdra`` CLI.

Registered under the ``imexdra.commands`` entry-point group (sim/pyproject.toml), which
``imexdra.cli.main`` reads only when a command it does not have itself is asked for; so the driver's
own commands never load this package, and an install without it simply has no ``demo``.
"""

from typing import Literal

import click


@click.command("demo")
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
@click.option(
    "--network-policy/--no-network-policy",
    default=True,
    show_default=True,
    help="containerd: enforce NetworkPolicies (kube-router's firewall on every node); fakecri has none",
)
@click.option(
    "--from-registry/--imported-image",
    default=True,
    show_default=True,
    help="containerd: install as an operator does, from the cluster's registry (nodes pull the image)",
)
@click.option(
    "--binding-conditions/--no-binding-conditions",
    default=True,
    show_default=True,
    help="driver-managed: bind workers only to a Ready IMEX daemon (gate ComputeDomainBindingConditions)",
)
def demo(
    nodes: int,
    host_managed: bool,
    keep: bool,
    runtime: Literal["containerd", "fakecri"],
    network_policy: bool,
    from_registry: bool,
    binding_conditions: bool,
) -> None:
    """Run the seed's MPIJob with a ComputeDomain on a simulated NVL72 rack."""
    # Imported here so that `imexdra --help`, which lists this command, stays as quick as before.
    from imexdra_sim.demo import run_demo
    from imexdra_sim.rack import RackConfig

    enforced = network_policy and runtime == "containerd"
    gates = {"ComputeDomainBindingConditions": True} if binding_conditions and not host_managed else {}
    config = RackConfig(
        nodes=nodes,
        host_managed=host_managed,
        runtime=runtime,
        network_policy=enforced,
        from_registry=from_registry and runtime == "containerd",
        extra_values={"featureGates": gates} if gates else {},
    )
    run_demo(config, keep=keep)
