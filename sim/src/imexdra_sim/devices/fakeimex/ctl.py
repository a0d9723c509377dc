"""The fake ``nvidia-imex-ctl`` (``python -m imexdra_sim.devices.fakeimex.ctl``).

Supported invocations, with the real tool's output shapes (docs/hardware.md §7.2):

- ``-q``: one line, ``READY`` when the local daemon is ready (otherwise its state, e.g. ``NOT_READY``);
- ``-N``: the connectivity legend, a timestamp, one ``Node #i - <address> - <state> - Version: <v>``
  line per node-list entry, the from/to matrix and ``Domain State: UP`` (or ``DEGRADED``);
- ``-N -j``: the same data as JSON.

The daemon is reached through its command service: ``--u=<path>`` (a unix socket), ``-i``/``-p``, or
else what the config (``-c``, default ``/etc/nvidia-imex/config.cfg``) names: the unix socket if
``IMEX_CMD_UNIX_DOMAIN_PATH`` is set, otherwise ``IMEX_CMD_BIND_INTERFACE_IP`` (127.0.0.1 when empty)
at ``IMEX_CMD_PORT``. When the daemon cannot be reached the tool says so and exits 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from imexdra.devices.imex import (
    CMD_BIND_INTERFACE_IP,
    CMD_PORT,
    CMD_UNIX_DOMAIN_PATH,
    DEFAULT_CONFIG_PATH,
    config_int,
    parse_config,
)
from imexdra_sim.devices.fakeimex.protocol import Message, ProtocolError, Target, request

LEGEND = """Connectivity Table Legend:
I - Invalid - Node wasn't reachable, no connection status available
N - Never Connected
R - Recovering - Connection was lost, but clean up has not yet been triggered.
D - Disconnected - Connection was lost, and clean up has been triggered.
A - Authenticating - If GSSAPI enabled, client has initiated mutual authentication.
!V! - Version mismatch, communication disabled.
!M! - Node map mismatch, communication disabled.
C - Connected - Ready for operation
"""

_TIMEOUT = 5.0


class CtlError(Exception):
    """The command service could not be named or reached."""


def _target(args: argparse.Namespace) -> Target:
    """``("unix", path)`` or ``(host, port)`` of the daemon's command service."""
    if args.u:
        return "unix", args.u
    config: dict[str, str] = {}
    if args.ip is None or args.port is None:
        try:
            config = parse_config(Path(args.config).read_text())
        except OSError as error:
            raise CtlError(f"cannot read config file {args.config}: {error}") from error
    if args.ip is None and args.port is None and config.get(CMD_UNIX_DOMAIN_PATH):
        return "unix", config[CMD_UNIX_DOMAIN_PATH]
    try:
        port = args.port if args.port is not None else config_int(config, CMD_PORT)
    except ValueError as error:
        raise CtlError(str(error)) from error
    if port is None:
        raise CtlError(f"no IMEX command service configured in {args.config} (IMEX_CMD_PORT)")
    return args.ip or config.get(CMD_BIND_INTERFACE_IP) or "127.0.0.1", port


def fetch_status(target: Target) -> Message:
    """Ask the daemon at ``target`` for its status (blocking)."""
    try:
        return request(target, {"op": "status"}, within=_TIMEOUT)
    except (OSError, ProtocolError) as error:
        where, port = target
        shown = port if where == "unix" else f"{where}:{port}"
        raise CtlError(f"Unable to connect to the IMEX daemon at {shown}: {error or 'timed out'}") from error


def format_nodes(status: Message, *, now: float | None = None) -> str:
    """The ``-N`` connectivity table."""
    nodes: list[dict[str, Any]] = status.get("nodes", [])
    matrix: dict[str, dict[str, str]] = status.get("matrix", {})
    stamp = time.strftime("%m/%d/%Y %H:%M:%S", time.localtime(now))
    lines = [LEGEND, stamp, "Nodes:"]
    for node in nodes:
        shown = node.get("address") or node.get("entry", "")
        lines.append(
            f"Node #{node['index']:<3} - {shown:<15} - {node.get('state', ''):<20} "
            f"- Version: {node.get('version', '')}".rstrip()
        )
    indices = [str(node["index"]) for node in nodes]
    lines.append("")
    lines.append(" Nodes From\\To  " + "".join(f"{i:>6}  " for i in indices).rstrip())
    for source in indices:
        row = matrix.get(source, {})
        lines.append(f"    {source:>6}      " + "".join(f"{row.get(t, 'I'):>6}  " for t in indices).rstrip())
    lines.append(f"Domain State: {status.get('domainState', 'DEGRADED')}")
    return "\n".join(lines) + "\n"


def format_nodes_json(status: Message) -> str:
    """The ``-N -j`` document."""
    document = {
        "timestamp": time.strftime("%m/%d/%Y %H:%M:%S"),
        "nodes": {
            str(node["index"]): {
                "host": node.get("entry", ""),
                "ip": node.get("address") or "",
                "status": node.get("state", ""),
                "version": node.get("version", ""),
                "connections": status.get("matrix", {}).get(str(node["index"]), {}),
            }
            for node in status.get("nodes", [])
        },
        "status": status.get("domainState", "DEGRADED"),
    }
    return json.dumps(document, indent=2) + "\n"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nvidia-imex-ctl", description="Simulated IMEX control tool.")
    parser.add_argument("-c", "--config", default=DEFAULT_CONFIG_PATH, help="IMEX config file")
    parser.add_argument("-q", "--query", action="store_true", help="print the local daemon's state")
    parser.add_argument("-N", "--nodes", action="store_true", help="print the connectivity table")
    parser.add_argument("-j", "--json", action="store_true", help="JSON output (with -N)")
    parser.add_argument("-u", "--u", default="", help="command service unix socket")
    parser.add_argument("-i", "--ip", default=None, help="command service address")
    parser.add_argument("-p", "--port", type=int, default=None, help="command service port")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one query; returns the exit code."""
    args = _parser().parse_args(argv)
    if not (args.query or args.nodes):
        print("nvidia-imex-ctl: nothing to do (use -q or -N)", file=sys.stderr)
        return 2
    try:
        status = fetch_status(_target(args))
    except CtlError as error:
        print(error, file=sys.stderr)
        return 1
    if "error" in status:
        print(f"nvidia-imex-ctl: {status['error']}", file=sys.stderr)
        return 1
    if args.nodes:
        sys.stdout.write(format_nodes_json(status) if args.json else format_nodes(status))
    else:
        sys.stdout.write(f"{status.get('state', 'UNKNOWN')}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
