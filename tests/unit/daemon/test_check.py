"""The readiness check's verdicts."""

from __future__ import annotations

import pytest

from imexdra.daemon.check import NOOP_MESSAGE, check
from imexdra.devices.imex import ImexError, QueryResult
from imexdra_sim.devices.imex_fake import FakeImex


class Answer(FakeImex):
    """A FakeImex whose query answer (or failure) is fixed."""

    def __init__(self, result: QueryResult | ImexError) -> None:
        super().__init__()
        self.result = result

    async def query(self) -> QueryResult:
        if isinstance(self.result, ImexError):
            raise self.result
        return self.result


@pytest.mark.parametrize(
    ("answer", "ok", "message"),
    [
        (QueryResult(0, "READY\n"), True, ""),
        (QueryResult(0, "NOT_READY\n"), False, "IMEX daemon not ready: 'NOT_READY\\n'"),
        (QueryResult(0, "READY"), False, "IMEX daemon not ready: 'READY'"),
        (QueryResult(1, "Unable to connect\n"), False, "nvidia-imex-ctl exited 1: Unable to connect"),
        (ImexError("run nvidia-imex-ctl: not found"), False, "IMEX daemon not ready: run nvidia-imex-ctl"),
    ],
    ids=["ready", "not-ready", "missing-newline", "ctl-failed", "ctl-missing"],
)
async def test_verdicts(answer: QueryResult | ImexError, ok: bool, message: str) -> None:
    """Only an exact READY passes; every failure says why."""
    result = await check(Answer(answer), clique_id="uuid.1")
    assert result.ok is ok
    assert message in result.message


async def test_no_clique_always_passes() -> None:
    """A daemon on a node without a fabric runs no IMEX and passes without asking."""
    result = await check(Answer(ImexError("must not be called")), clique_id="")
    assert (result.ok, result.message) == (True, NOOP_MESSAGE)
