"""The fuzz suite's two sizes and its count of inputs tried.

Two hypothesis profiles are registered: ``ci`` (the default: the whole directory in seconds) and
``soak`` (``IMEXDRA_SOAK=1``: at least ``SOAK_TARGET`` inputs across the suite). They are applied
per test through ``fuzz()`` rather than loaded globally, so other test directories that use
hypothesis keep their own settings when run in the same session. Each test states its example count
for both sizes, since one input costs microseconds for a parser and milliseconds for a prepare.

``fuzz()`` also counts every call of the test body (every input tried, explicit examples and
shrinking included); ``conftest`` prints the total at the end of the session.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections import Counter
from collections.abc import Callable
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings

SOAK = os.environ.get("IMEXDRA_SOAK") == "1"
#: The issue's figure for a soak run: inputs tried across the whole suite.
SOAK_TARGET = 100_000

settings.register_profile(
    "ci",
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile(
    "soak",
    max_examples=5_000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
PROFILE = settings.get_profile("soak" if SOAK else "ci")

#: Inputs tried per test (qualified name); filled while tests run.
TRIED: Counter[str] = Counter()
#: The example count each decorated test asks for in this profile.
PLANNED: dict[str, int] = {}

_F = TypeVar("_F", bound=Callable[..., Any])


def fuzz(*, ci: int, soak: int) -> Callable[[_F], _F]:
    """Run a ``@given`` test with ``ci`` examples, or ``soak`` under ``IMEXDRA_SOAK=1``; count its inputs.

    Put it above ``@given``.
    """

    def decorate(test: _F) -> _F:
        name = f"{test.__module__.rsplit('.', 1)[-1]}::{test.__name__}"
        PLANNED[name] = soak if SOAK else ci
        inner = test.hypothesis.inner_test  # type: ignore[attr-defined]
        if inspect.iscoroutinefunction(inner):

            @functools.wraps(inner)
            async def counted_async(*args: Any, **kwargs: Any) -> Any:
                TRIED[name] += 1
                return await inner(*args, **kwargs)

            test.hypothesis.inner_test = counted_async  # type: ignore[attr-defined]
        else:

            @functools.wraps(inner)
            def counted(*args: Any, **kwargs: Any) -> Any:
                TRIED[name] += 1
                return inner(*args, **kwargs)

            test.hypothesis.inner_test = counted  # type: ignore[attr-defined]
        sized: _F = settings(PROFILE, max_examples=PLANNED[name])(test)
        return sized

    return decorate
