"""Fuzz-suite session hooks: the hypothesis profiles (see ``profiles``) and the inputs-tried figure.

At the end of a session that ran fuzz tests, one line reports how many inputs were tried, in which
profile. A soak run (``IMEXDRA_SOAK=1``) that ran every fuzz test fails when the total falls short of
``SOAK_TARGET``: the figure is the point of a soak, so it must not quietly shrink (e.g. a strategy
whose space ran out early).
"""

from __future__ import annotations

import pytest

from tests.support.session import progress
from tests.unit.fuzz.profiles import PLANNED, SOAK, SOAK_TARGET, TRIED


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Report the inputs tried; in a full soak run, require ``SOAK_TARGET`` of them."""
    if not TRIED:
        return
    total = sum(TRIED.values())
    profile = "soak" if SOAK else "ci"
    progress(
        session.config,
        f"fuzz: {total} inputs tried by {len(TRIED)} property tests (profile {profile}, "
        f"{sum(PLANNED[name] for name in TRIED)} examples planned)",
    )
    if SOAK and set(TRIED) == set(PLANNED) and total < SOAK_TARGET and exitstatus == pytest.ExitCode.OK:
        progress(session.config, f"fuzz: soak tried {total} inputs, fewer than the target {SOAK_TARGET}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
