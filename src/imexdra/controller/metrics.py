"""The controller's Prometheus metrics.

- ``nvidia_dra_compute_domain_info{status}``: ComputeDomains per global status, upstream's gauge. Unlike
  upstream (docs/compatibility.md §3.1) it counts every domain this process reconciled, not only
  those whose status it happened to rewrite, so it is right after a restart too; a domain is forgotten
  when its finalizer is removed.
- ``imexdra_controller_api_writes_total{resource,verb,code}``: every write the controller sends, by
  outcome, so writes per domain lifecycle and conflicts (code 409) can be read off directly.
- ``imexdra_imex_channel_pool_size`` and ``imexdra_imex_channels_in_use``: under channel isolation, the
  numbers the controller hands out (``1 .. channelCount - 1``) and how many of them are taken, read
  off the channel book at each scrape (docs/channel-isolation.md §4); both 0 under domain isolation.
  A pool that runs out leaves new domains NotReady, so this is what an operator alerts on before.
"""

from __future__ import annotations

from collections import Counter as Tally

from prometheus_client import Counter, Gauge

from imexdra.api.constants import ComputeDomainStatusValue
from imexdra.controller.channels import FIRST_CHANNEL, ChannelBook

DOMAIN_INFO = Gauge(
    "nvidia_dra_compute_domain_info",
    "ComputeDomains by global status, as this controller sees them.",
    ["status"],
)
API_WRITES = Counter(
    "imexdra_controller_api_writes_total",
    "API writes by the controller: resource, verb (create, patch, update, delete) and HTTP status code.",
    ["resource", "verb", "code"],
)

CHANNEL_POOL_SIZE = Gauge(
    "imexdra_imex_channel_pool_size",
    "IMEX channels the controller hands out to ComputeDomains under channel isolation; 0 otherwise.",
)
CHANNELS_IN_USE = Gauge(
    "imexdra_imex_channels_in_use",
    "IMEX channels of the pool recorded by a live ComputeDomain or still held by a claim's allocation.",
)


def publish_channel_book(book: ChannelBook) -> None:
    """Export ``book``'s pool and the numbers taken in it (read at each scrape, never stale)."""
    CHANNEL_POOL_SIZE.set(book.pool_size - FIRST_CHANNEL)
    CHANNELS_IN_USE.set_function(book.taken)


class DomainStatusMetrics:
    """Keeps ``nvidia_dra_compute_domain_info`` equal to the count of known domains per status."""

    def __init__(self) -> None:
        self._status: dict[str, ComputeDomainStatusValue] = {}
        self._publish()

    def observe(self, uid: str, status: ComputeDomainStatusValue) -> None:
        """Record the domain's current global status."""
        if self._status.get(uid) != status:
            self._status[uid] = status
            self._publish()

    def forget(self, uid: str) -> None:
        """Stop counting a finalized domain (upstream's ``ForgetComputeDomain``)."""
        if self._status.pop(uid, None) is not None:
            self._publish()

    def known(self, uid: str) -> ComputeDomainStatusValue | None:
        """The last status recorded for ``uid``."""
        return self._status.get(uid)

    def _publish(self) -> None:
        counts = Tally(self._status.values())
        for status in ComputeDomainStatusValue:
            DOMAIN_INFO.labels(status=status.value).set(counts.get(status, 0))
