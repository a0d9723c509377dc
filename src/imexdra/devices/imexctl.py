"""``nvidia-imex-ctl`` queries, run synchronously: the probe's whole job, and a thread's in the services.

``compute-domain-daemon check`` is the daemon pod's startup probe (every second until IMEX is up, on
every node of the domain) and its readiness and liveness probe afterwards, so what it imports is what
each probe costs: this module needs only ``subprocess``, no event loop (importing asyncio alone is
most of a probe's CPU time, docs/data-path.md §9.3). The daemon's own queries and the kubelet plugin's
of the host's IMEX run the same function in a worker thread (``asyncio.to_thread``), and so does the
daemon's connectivity query (``query_nodes``, ``-N``, read by ``devices.imexnodes``).
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from imexdra.devices.imex import ImexError, QueryResult
from imexdra.devices.imexnodes import NodesReport, parse_nodes

#: How long a query may take before it counts as "not ready" (the probes' own timeout is 10 s too).
QUERY_TIMEOUT_SECONDS = 10.0


def run_query(argv: Sequence[str], answer_within: float) -> QueryResult:
    """Run one ``nvidia-imex-ctl`` query: its exit code and stdout+stderr as one text.

    Raises:
        OSError: the program could not be started.
        TimeoutError: no answer within ``answer_within`` seconds; the program is killed and reaped first.

    """
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            timeout=answer_within,
            check=False,
        )
    except subprocess.TimeoutExpired:  # run() has killed and reaped it
        raise TimeoutError(f"{argv[0]} did not answer within {answer_within:g}s") from None
    return QueryResult(returncode=done.returncode, output=done.stdout.decode(errors="replace"))


def query_daemon(ctl: str, config: Path, answer_within: float = QUERY_TIMEOUT_SECONDS) -> QueryResult:
    """Ask the IMEX daemon of ``config`` (``nvidia-imex-ctl -c <config> -q``) whether it is ready.

    Raises:
        ImexError: the query could not be run or did not answer in time.

    """
    try:
        return run_query([ctl, "-c", str(config), "-q"], answer_within)
    except TimeoutError:  # before OSError, of which it is a subclass
        raise ImexError(f"{ctl} -q did not answer within {answer_within:g}s") from None
    except OSError as error:
        raise ImexError(f"run {ctl}: {error}") from error


def query_nodes(ctl: str, config: Path, answer_within: float = QUERY_TIMEOUT_SECONDS) -> NodesReport:
    """The IMEX daemon's connectivity table (``nvidia-imex-ctl -c <config> -N``).

    Raises:
        ImexError: the query could not be run, did not answer in time, failed, or printed no table.

    """
    try:
        result = run_query([ctl, "-c", str(config), "-N"], answer_within)
    except TimeoutError:
        raise ImexError(f"{ctl} -N did not answer within {answer_within:g}s") from None
    except OSError as error:
        raise ImexError(f"run {ctl}: {error}") from error
    if result.returncode != 0:
        raise ImexError(f"{ctl} -N exited with {result.returncode}: {result.output.strip()[:200]}")
    return parse_nodes(result.output)
