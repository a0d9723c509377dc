"""A network fault between two pods of a containerd cluster: their TCP to one port dropped on the way.

Pods of different containerd nodes talk through their nodes' namespaces, which forward the packets
(docs/node-runtime.md §6). ``dropped`` inserts two ``DROP`` rules at the top of one node's ``FORWARD``
chain, one per direction, for TCP between the two pod addresses to ``port``, and deletes exactly those
rules on the way out: as if the cable between them were pulled for that traffic alone. Nothing else
on the node, or on the machine, is touched, and the pods cannot tell it from a real fault.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from imexdra_sim.localcluster.binaries import Binaries
from imexdra_sim.localcluster.enforcer import in_node_netns
from imexdra_sim.localcluster.nodes import Node
from imexdra_sim.localcluster.processes import ClusterStartError


def _rule(source: str, destination: str, port: int) -> list[str]:
    return ["-s", source, "-d", destination, "-p", "tcp", "--dport", str(port), "-j", "DROP"]


def _iptables(node: Node, binaries: Binaries, *argv: str) -> None:
    result = in_node_netns(node, binaries, "iptables", "-t", "filter", *argv)
    if result.returncode != 0:
        raise ClusterStartError(f"iptables {' '.join(argv)} on {node.name} failed: {result.stderr.strip()}")


@contextmanager
def dropped(node: Node, binaries: Binaries, a: str, b: str, port: int) -> Iterator[None]:
    """TCP between pod addresses ``a`` and ``b`` to ``port`` dropped on ``node`` while inside."""
    rules = [_rule(a, b, port), _rule(b, a, port)]
    inserted: list[list[str]] = []
    try:
        for rule in rules:
            _iptables(node, binaries, "-I", "FORWARD", "1", *rule)
            inserted.append(rule)
        yield
    finally:
        for rule in inserted:
            _iptables(node, binaries, "-D", "FORWARD", *rule)
