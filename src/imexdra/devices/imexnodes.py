r"""Reading ``nvidia-imex-ctl -N``: the local IMEX daemon's connectivity table (pure, stdlib only).

The tool prints (docs/hardware.md §7.2) a legend, a timestamp, one line per node-list entry,
``Node #<i> - <address> - <state> - Version: <version>``, then the from/to matrix, a header row
``Nodes From\To  0  1  2`` followed by one row per node, ``<from>  C  C  R``, whose columns are the
state codes of its connections to each node, and finally ``Domain State: UP`` (or ``DEGRADED``).
With ``-j`` the same data comes as JSON: ``{"nodes": {"<i>": {"host", "ip", "status", "version",
"connections": {"<j>": "<code>"}}}, "status": "UP"}``. Both are read into one ``NodesReport``;
``parse_nodes`` picks the reader by the first character.

The row that matters to a daemon is its own: how its IMEX daemon sees each peer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from imexdra.devices.imex import ImexError

_NODE_LINE = re.compile(r"^\s*Node\s*#\s*(\d+)\s*-\s*(\S*)\s*-\s*(.*?)\s*-\s*Version:\s*(\S*)\s*$")
_MATRIX_HEADER = re.compile(r"^\s*Nodes\s+From\s*\\\s*To\b(.*)$")
_MATRIX_ROW = re.compile(r"^\s*(\d+)\s+(.*)$")
_DOMAIN_STATE = re.compile(r"^\s*Domain State:\s*(\S+)")


@dataclass(frozen=True, slots=True)
class NodeLine:
    """One node-list entry: its number, address, reported state and IMEX version."""

    index: int
    address: str
    state: str
    version: str


@dataclass(frozen=True, slots=True)
class NodesReport:
    """The whole table: the nodes, the matrix (from → to → state code) and the domain state."""

    nodes: tuple[NodeLine, ...]
    matrix: Mapping[int, Mapping[int, str]] = field(default_factory=dict)
    domain_state: str = ""

    def index_of(self, address: str) -> int | None:
        """The node number listed with ``address``, if any."""
        return next((n.index for n in self.nodes if n.address == address), None)

    def row(self, index: int) -> Mapping[int, str]:
        """How node ``index`` sees every node (empty when the table has no such row)."""
        return self.matrix.get(index, {})


def parse_nodes_text(text: str) -> NodesReport:
    """Read the text table; raises ``ImexError`` when it has neither nodes nor a domain state."""
    nodes: list[NodeLine] = []
    matrix: dict[int, dict[int, str]] = {}
    columns: list[int] = []
    domain_state = ""
    for line in text.splitlines():
        if match := _NODE_LINE.match(line):
            index, address, state, version = match.groups()
            nodes.append(NodeLine(int(index), address, state.strip(), version))
        elif match := _MATRIX_HEADER.match(line):
            columns = [int(token) for token in match.group(1).split() if token.isdigit()]
        elif match := _DOMAIN_STATE.match(line):
            domain_state = match.group(1)
        elif columns and (match := _MATRIX_ROW.match(line)):
            codes = match.group(2).split()
            if len(codes) == len(columns):
                matrix[int(match.group(1))] = dict(zip(columns, codes, strict=True))
    if not nodes and not domain_state:
        raise ImexError(f"nvidia-imex-ctl -N printed no connectivity table: {text.strip()[:200]!r}")
    return NodesReport(tuple(nodes), matrix, domain_state)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def parse_nodes_json(text: str) -> NodesReport:
    """Read the ``-N -j`` document; raises ``ImexError`` when it is not one."""
    try:
        document = json.loads(text)
    except ValueError as error:
        raise ImexError(f"nvidia-imex-ctl -N -j printed no JSON: {error}") from None
    entries = document.get("nodes") if isinstance(document, dict) else None
    if not isinstance(entries, dict):
        raise ImexError("nvidia-imex-ctl -N -j printed no 'nodes' object")
    nodes: list[NodeLine] = []
    matrix: dict[int, dict[int, str]] = {}
    for key, entry in entries.items():
        if not (isinstance(key, str) and key.isdigit() and isinstance(entry, dict)):
            continue
        index = int(key)
        address = _text(entry.get("ip")) or _text(entry.get("host"))
        nodes.append(NodeLine(index, address, _text(entry.get("status")), _text(entry.get("version"))))
        connections = entry.get("connections")
        if isinstance(connections, dict):
            matrix[index] = {
                int(to): code for to, code in connections.items() if to.isdigit() and isinstance(code, str)
            }
    nodes.sort(key=lambda n: n.index)
    return NodesReport(tuple(nodes), matrix, _text(document.get("status")))


def parse_nodes(text: str) -> NodesReport:
    """Read either form of ``nvidia-imex-ctl -N`` output."""
    return parse_nodes_json(text) if text.lstrip().startswith("{") else parse_nodes_text(text)
