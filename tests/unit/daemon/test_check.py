"""The readiness check's verdicts."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from imexdra.daemon.check import NOOP_MESSAGE, check
from imexdra.devices.imex import ImexError, QueryResult


def answer(result: QueryResult | ImexError) -> Callable[[], QueryResult]:
    """A query whose answer (or failure) is fixed."""

    def query() -> QueryResult:
        if isinstance(result, ImexError):
            raise result
        return result

    return query


@pytest.mark.parametrize(
    ("reply", "ok", "message"),
    [
        (QueryResult(0, "READY\n"), True, ""),
        (QueryResult(0, "NOT_READY\n"), False, "IMEX daemon not ready: 'NOT_READY\\n'"),
        (QueryResult(0, "READY"), False, "IMEX daemon not ready: 'READY'"),
        (QueryResult(1, "Unable to connect\n"), False, "nvidia-imex-ctl exited 1: Unable to connect"),
        (ImexError("run nvidia-imex-ctl: not found"), False, "IMEX daemon not ready: run nvidia-imex-ctl"),
    ],
    ids=["ready", "not-ready", "missing-newline", "ctl-failed", "ctl-missing"],
)
def test_verdicts(reply: QueryResult | ImexError, ok: bool, message: str) -> None:
    """Only an exact READY passes; every failure says why."""
    result = check(answer(reply), clique_id="uuid.1")
    assert result.ok is ok
    assert message in result.message


def test_no_clique_always_passes() -> None:
    """A daemon on a node without a fabric runs no IMEX and passes without asking."""
    result = check(answer(ImexError("must not be called")), clique_id="")
    assert (result.ok, result.message) == (True, NOOP_MESSAGE)
