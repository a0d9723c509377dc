"""Fixtures shared by every test tier."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.session import progress, record_failure
from tests.support.timing import SuiteTimes


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A fresh directory directly under /tmp, for unix sockets.

    A socket path may hold at most 107 bytes; pytest's ``tmp_path`` grows with its run counter and the
    test's name (``/tmp/pytest-of-root/pytest-123/test_some_long_name0/...``) and passes that limit on a
    machine that has run the suite often enough.
    """
    path = Path(tempfile.mkdtemp(prefix="imxt", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


OPTIONAL_MODULES = {
    "test_migration_upstream_chart.py": "upstream_checkout",
    "test_upgrade.py": "upgrade_from",
}
"""Modules collected only when their option is given (CI gives neither; never a skipped test)."""


def pytest_addoption(parser: pytest.Parser) -> None:
    """The options of ``OPTIONAL_MODULES``, and where to write the suite's times."""
    parser.addoption(
        "--upstream-checkout",
        default="",
        help="a checkout of NVIDIA/k8s-dra-driver-gpu; the upstream-chart migration test needs one",
    )
    parser.addoption(
        "--upgrade-from",
        default="",
        help="a commit of this repository: tests/e2e/test_upgrade.py upgrades from it (make upgrade-test)",
    )
    parser.addoption("--times-json", default="", help="write seconds per tier and per module to this file")


def pytest_configure(config: pytest.Config) -> None:
    """Time every module and tier (``tests.support.timing``)."""
    config.pluginmanager.register(SuiteTimes(config.getoption("times_json")), "imexdra-suite-times")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Leave out each of ``OPTIONAL_MODULES`` unless its option is given."""
    option = OPTIONAL_MODULES.get(collection_path.name)
    if option is not None and not config.getoption(option):
        return True
    return None


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Iterator[None]:
    """Make the loop an async test runs on the current event loop (before looptime looks for it).

    A sync test that called ``asyncio.run`` (the fuzz tests do) leaves no current loop behind; looptime
    finds a test's loop as the current one, and without it would run a ``looptime`` test on the real
    clock (docs/testing.md, "Waiting in tests").
    """
    runners = [v for k, v in pyfuncitem.funcargs.items() if k.endswith("_scoped_runner")]
    if runners and isinstance(runners[0], asyncio.Runner):
        asyncio.set_event_loop(runners[0].get_loop())
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Count failures for ``tests.support.session.failure_count``."""
    report = yield
    if getattr(report, "failed", False):
        record_failure(item.config)
    return report


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Under CI=true, fail the run when no test ran or any test was skipped."""
    if os.environ.get("CI", "").lower() not in ("1", "true", "yes"):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = [report.nodeid for report in reporter.stats.get("skipped", [])] if reporter else []
    if skipped:
        progress(session.config, f"CI forbids skipped tests; skipped: {', '.join(skipped)}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    elif session.testscollected == 0:
        progress(session.config, "CI: no tests were collected")
        session.exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED
