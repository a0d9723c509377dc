"""Reading nvidia-imex-ctl -N: the documented text table, the fake's text and JSON, and bad output."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from imexdra.devices.imex import ImexError
from imexdra.devices.imexctl import query_nodes
from imexdra.devices.imexnodes import NodeLine, parse_nodes
from imexdra_sim.devices.fakeimex.ctl import format_nodes, format_nodes_json

# The shape NVIDIA's tool prints (docs/hardware.md §7.2), written out by hand: three nodes, node 2 lost.
DOCUMENTED = """Connectivity Table Legend:
I - Invalid - Node wasn't reachable, no connection status available
N - Never Connected
R - Recovering - Connection was lost, but clean up has not yet been triggered.
D - Disconnected - Connection was lost, and clean up has been triggered.
A - Authenticating - If GSSAPI enabled, client has initiated mutual authentication.
!V! - Version mismatch, communication disabled.
!M! - Node map mismatch, communication disabled.
C - Connected - Ready for operation

11/30/2026 21:14:03
Nodes:
Node #0   - 10.115.131.12   - READY                - Version: 570.172.08
Node #1   - 10.115.131.13   - READY                - Version: 570.172.08
Node #2   - 10.115.131.14   - UNAVAILABLE          - Version: 570.172.08

 Nodes From\\To     0       1       2
       0           C       C       R
       1           C       C       D
       2           I       I       I
Domain State: DEGRADED
"""

# What the fake daemon answers (its status message), three nodes seen from node 0, node 2 mismatched.
FAKE_STATUS: dict[str, Any] = {
    "nodes": [
        {"index": 0, "entry": "compute-domain-daemon-0000", "address": "10.0.0.1", "state": "READY"},
        {"index": 1, "entry": "compute-domain-daemon-0001", "address": "10.0.0.2", "state": "READY"},
        {"index": 2, "entry": "compute-domain-daemon-0002", "address": None, "state": "UNAVAILABLE"},
    ],
    "matrix": {"0": {"0": "C", "1": "C", "2": "!M!"}, "1": {"0": "C", "1": "C", "2": "N"}},
    "domainState": "DEGRADED",
}


def test_documented_table() -> None:
    """Nodes, every matrix row and the domain state are read from the documented text form."""
    report = parse_nodes(DOCUMENTED)
    assert report.nodes == (
        NodeLine(0, "10.115.131.12", "READY", "570.172.08"),
        NodeLine(1, "10.115.131.13", "READY", "570.172.08"),
        NodeLine(2, "10.115.131.14", "UNAVAILABLE", "570.172.08"),
    )
    assert report.row(0) == {0: "C", 1: "C", 2: "R"}
    assert report.row(1) == {0: "C", 1: "C", 2: "D"}
    assert report.domain_state == "DEGRADED"
    assert report.index_of("10.115.131.14") == 2
    assert report.index_of("10.9.9.9") is None


@pytest.mark.parametrize("render", [format_nodes, format_nodes_json], ids=["text", "json"])
def test_fake_output_reads_back(render: Any) -> None:
    """What the fake nvidia-imex-ctl prints, in either form, reads back to the same report."""
    report = parse_nodes(render(FAKE_STATUS))
    assert [(n.index, n.state) for n in report.nodes] == [(0, "READY"), (1, "READY"), (2, "UNAVAILABLE")]
    assert report.index_of("10.0.0.2") == 1
    assert report.row(0) == {0: "C", 1: "C", 2: "!M!"}
    assert report.domain_state == "DEGRADED"


@pytest.mark.parametrize(
    "output",
    [
        "Unable to connect to the IMEX daemon at 10.0.0.1:50005: timed out\n",
        "",
        '{"status": "UP"}',
        "{not json",
    ],
    ids=["error-text", "empty", "json-without-nodes", "broken-json"],
)
def test_output_without_a_table_is_an_error(output: str) -> None:
    """Output with no table in it is an ImexError, not an empty report."""
    with pytest.raises(ImexError):
        parse_nodes(output)


def test_query_runs_the_tool_with_dash_n(tmp_path: Path) -> None:
    """query_nodes runs ``-c <config> -N`` and reads what it prints; a failing tool is an ImexError."""
    ctl = tmp_path / "nvidia-imex-ctl"
    argv_file = tmp_path / "argv"
    table = tmp_path / "table"
    table.write_text(DOCUMENTED)
    ctl.write_text(
        f"#!{sys.executable}\nimport sys, pathlib\n"
        f"pathlib.Path({str(argv_file)!r}).write_text(' '.join(sys.argv[1:]))\n"
        f"sys.stdout.write(pathlib.Path({str(table)!r}).read_text())\n"
    )
    ctl.chmod(0o755)
    report = query_nodes(str(ctl), tmp_path / "imexd.cfg")
    assert argv_file.read_text() == f"-c {tmp_path / 'imexd.cfg'} -N"
    assert report.row(1)[2] == "D"
    ctl.write_text("#!/bin/sh\necho 'Unable to connect to the IMEX daemon' >&2\nexit 1\n")
    with pytest.raises(ImexError, match="exited with 1: Unable to connect"):
        query_nodes(str(ctl), tmp_path / "imexd.cfg")
