"""``python -m imexdra_sim.localcluster``: bring the local cluster up and keep it running until Ctrl-C."""

from __future__ import annotations

import signal
import time

import click

from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.localcluster.nodes import GPU_NODE_LABELS, NodeSpec


@click.command()
@click.option("--nodes", "node_count", default=2, show_default=True, help="number of simulated GPU nodes")
@click.option("--clique", default="imexdra-rack-0.0", show_default=True, help="nvidia.com/gpu.clique label")
def main(node_count: int, clique: str) -> None:
    """Start a real local Kubernetes 1.36 cluster with simulated GB200 nodes."""
    specs = [
        NodeSpec(
            name=f"gb200-{i:02d}",
            labels={**GPU_NODE_LABELS, "nvidia.com/gpu.clique": clique},
            pod_cidr=f"127.100.{i + 1}.0/24",
        )
        for i in range(node_count)
    ]
    click.echo(f"starting local control plane and {node_count} node(s)...")
    with LocalCluster(nodes_specs=specs) as cluster:
        secs = cluster.startup_seconds
        click.echo(
            f"cluster ready in {secs['total']:.1f}s (control plane {secs['control_plane']:.1f}s, "
            f"nodes {secs.get('nodes', 0):.1f}s)"
        )
        click.echo(cluster.kubectl("get", "nodes", "-o", "wide").stdout)
        click.echo(f"export KUBECONFIG={cluster.kubeconfig}")
        click.echo(f"logs: {cluster.run_dir}/logs — press Ctrl-C to stop")
        stop = False

        def _stop(*_: object) -> None:
            nonlocal stop
            stop = True

        signal.signal(signal.SIGTERM, _stop)
        try:
            while not stop:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
        click.echo("stopping...")


if __name__ == "__main__":
    main()
