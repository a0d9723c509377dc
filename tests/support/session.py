"""The pytest session's bookkeeping every cluster fixture uses: progress lines, failures, cluster stops.

``tests/conftest.py`` counts failed phases through :func:`record_failure`; cluster fixtures compare
:func:`failure_count` before and after their tests to decide whether a cluster's logs are kept.
"""

from __future__ import annotations

import shutil

import pytest

from imexdra_sim.localcluster.cluster import LocalCluster

_FAILED = pytest.StashKey[int]()


def failure_count(config: pytest.Config) -> int:
    """How many test phases failed so far; cluster fixtures keep their logs when it grew."""
    return config.stash.get(_FAILED, 0)


def record_failure(config: pytest.Config) -> None:
    """Count one failed test phase (called by the report hook in ``tests/conftest.py``)."""
    config.stash[_FAILED] = failure_count(config) + 1


def stop_cluster(
    cluster: LocalCluster, config: pytest.Config, failed_before: int, what: str = "cluster"
) -> None:
    """Stop a test cluster; keep its logs only when a test failed since ``failed_before``."""
    cluster.stop()
    if failure_count(config) == failed_before and cluster.run_dir is not None:
        shutil.rmtree(cluster.run_dir, ignore_errors=True)
    else:
        progress(config, f"{what} logs kept in {cluster.run_dir}/logs")


def progress(config: pytest.Config, message: str) -> None:
    """Print a progress line that pytest does not capture (CI must show what the slow tiers do)."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None:
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line(f"[imexdra] {message}")
