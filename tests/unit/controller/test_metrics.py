"""The ComputeDomain status gauge counts every known domain once and forgets finalized ones."""

from __future__ import annotations

from prometheus_client import REGISTRY

from imexdra.api.constants import ComputeDomainStatusValue
from imexdra.controller.metrics import DomainStatusMetrics

READY = ComputeDomainStatusValue.READY
NOT_READY = ComputeDomainStatusValue.NOT_READY


def gauge(status: ComputeDomainStatusValue) -> float | None:
    return REGISTRY.get_sample_value("nvidia_dra_compute_domain_info", {"status": status.value})


def test_gauge_counts_domains_per_status_and_forgets() -> None:
    """Observations move a domain between statuses; forgetting removes it from the count."""
    metrics = DomainStatusMetrics()
    metrics.observe("a", NOT_READY)
    metrics.observe("b", READY)
    metrics.observe("a", READY)
    metrics.observe("a", READY)
    assert (gauge(READY), gauge(NOT_READY)) == (2, 0)
    metrics.forget("a")
    metrics.forget("unknown")
    assert (gauge(READY), gauge(NOT_READY)) == (1, 0)
    assert metrics.known("a") is None
    assert metrics.known("b") is READY
