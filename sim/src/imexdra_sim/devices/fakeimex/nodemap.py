"""The node list as the fake IMEX daemon sees it: entries from the nodes file, resolved to addresses.

Entries are IP addresses or hostnames. Hostnames resolve through a hosts file only (first mapping
wins, as with glibc's ``files`` source); one that does not resolve is not a member of the domain for
now, which is what lets a static list of DNS names (upstream's DNS-names mode) describe a domain whose
members come and go.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

from imexdra.devices.imex import parse_node_list


@dataclass(frozen=True, slots=True)
class NodeEntry:
    """One line of the node list: its position (the IMEX node ID), text and resolved address."""

    index: int
    entry: str
    address: str | None


@dataclass(frozen=True, slots=True)
class NodeMap:
    """The resolved node list."""

    nodes: tuple[NodeEntry, ...]

    @property
    def entries(self) -> list[str]:
        """The raw entries, which every daemon of a domain must agree on."""
        return [node.entry for node in self.nodes]

    def index_of(self, address: str) -> int | None:
        """The ID of the first node resolving to ``address``."""
        for node in self.nodes:
            if node.address == address:
                return node.index
        return None


def read_hosts(path: Path) -> dict[str, str]:
    """Name to address from a hosts file; a missing file maps nothing."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    mapping: dict[str, str] = {}
    for raw in text.splitlines():
        fields = raw.split("#", 1)[0].split()
        if len(fields) < 2:
            continue
        for name in fields[1:]:
            mapping.setdefault(name, fields[0])
    return mapping


def resolve(entry: str, hosts: dict[str, str]) -> str | None:
    """An IP literal as is, a hostname through ``hosts``, else None."""
    try:
        return str(ipaddress.ip_address(entry))
    except ValueError:
        return hosts.get(entry)


def load_node_map(node_file: Path, hosts_file: Path) -> NodeMap:
    """Read and resolve the node list (raises ``OSError`` when the nodes file cannot be read)."""
    hosts = read_hosts(hosts_file)
    entries = parse_node_list(node_file.read_text())
    return NodeMap(tuple(NodeEntry(i, entry, resolve(entry, hosts)) for i, entry in enumerate(entries)))
