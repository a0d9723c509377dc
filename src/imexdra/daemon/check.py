"""``compute-domain-daemon check``: the startup, liveness and readiness probe of a daemon pod.

Upstream semantics (docs/data-path.md §9.2, §9.3): a daemon without a clique (no NVLink fabric) runs
no IMEX and always passes; otherwise ``nvidia-imex-ctl -c <imexd.cfg> -q`` must exit 0 and print exactly
``READY`` and a newline. The pod's Ready condition, which the controller publishes as the daemon's status, is
therefore exactly "this node's IMEX daemon is ready".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from imexdra.devices.imex import ImexError, QueryResult

NOOP_MESSAGE = "check succeeded (noop, clique ID is empty)"


@dataclass(frozen=True, slots=True)
class CheckResult:
    """Whether the probe passes, and what to print."""

    ok: bool
    message: str


def check(query: Callable[[], QueryResult], *, clique_id: str) -> CheckResult:
    """Run the readiness check with ``query`` (which raises ``ImexError`` when it cannot answer)."""
    if not clique_id:
        return CheckResult(True, NOOP_MESSAGE)
    try:
        result = query()
    except ImexError as error:
        return CheckResult(False, f"IMEX daemon not ready: {error}")
    if result.returncode != 0:
        return CheckResult(
            False,
            f"IMEX daemon not ready: nvidia-imex-ctl exited {result.returncode}: {result.output.strip()}",
        )
    if not result.ready:
        return CheckResult(False, f"IMEX daemon not ready: {result.output!r}")
    return CheckResult(True, "")
