"""client-go's ``rest_client_*`` metric families, fed by the API transport.

Names, label names and buckets are those of Kubernetes' component-base (``metrics/prometheus/restclient``),
so the API-client panels of existing dashboards work unchanged:

- ``rest_client_requests_total{code, method, host}``: every response, ``code`` the HTTP status as a string
  or ``"<error>"`` when no response came (refused, reset, timed out); ``method`` the HTTP method (a watch
  is a ``GET``); ``host`` the API server's ``host:port`` as written in the kubeconfig's server URL.
- ``rest_client_request_duration_seconds{verb, host}``: from the moment a request asks the rate limiter
  for a slot to its body being read, like client-go's (so a throttled request shows its wait here too).
  Watches are not observed: they last as long as the server keeps them open.
- ``rest_client_rate_limiter_duration_seconds{verb, host}``: time spent waiting in the client-side
  ``--kube-api-qps``/``--kube-api-burst`` token bucket; only requests that pass through a bucket
  (watches do not, and a client without a QPS limit has no bucket).
- ``rest_client_request_size_bytes`` / ``rest_client_response_size_bytes{verb, host}``: body sizes as
  sent and received (before any content decoding); not for watches.

``verb`` is the HTTP method too, as in client-go. The families client-go has for parts we do not have
(exec credential plugins, the transport cache, DNS resolution timing, retries inside the client) are not
exported: a family that is always empty would only look like data.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from urllib.parse import urlsplit

from prometheus_client import Counter, Histogram

from imexdra.common.pacing.ratelimit import TokenBucket

#: component-base's buckets for request and rate-limiter latency (seconds).
LATENCY_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)
#: component-base's buckets for request and response sizes: 64 bytes to 16 MiB.
SIZE_BUCKETS: tuple[float, ...] = (64, 256, 512, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216)
#: The ``code`` of a request that got no HTTP response at all (client-go's spelling).
TRANSPORT_ERROR = "<error>"


def _by_verb_and_host(name: str, documentation: str, buckets: tuple[float, ...]) -> Histogram:
    return Histogram(name, documentation, ["verb", "host"], buckets=buckets)


REQUESTS = Counter(
    "rest_client_requests_total",
    "Kubernetes API requests by HTTP status (or <error>: no response), method and API server host.",
    ["code", "method", "host"],
)
REQUEST_DURATION = _by_verb_and_host(
    "rest_client_request_duration_seconds",
    "Kubernetes API request time, rate-limiter wait and body included, by verb and host.",
    LATENCY_BUCKETS,
)
RATE_LIMITER_DURATION = _by_verb_and_host(
    "rest_client_rate_limiter_duration_seconds",
    "Time spent waiting in the client-side QPS limiter, by verb and host.",
    LATENCY_BUCKETS,
)
REQUEST_SIZE = _by_verb_and_host(
    "rest_client_request_size_bytes", "Kubernetes API request body bytes, by verb and host.", SIZE_BUCKETS
)
RESPONSE_SIZE = _by_verb_and_host(
    "rest_client_response_size_bytes", "Kubernetes API response body bytes, by verb and host.", SIZE_BUCKETS
)


def server_host(server: str) -> str:
    """The ``host`` label of an API server URL: its host and port as written (client-go's ``URL.Host``)."""
    return urlsplit(server).netloc.rpartition("@")[2] or "none"


@dataclass(frozen=True, slots=True)
class RestClientMetrics:
    """Paces one component's requests to one API server (``host``) and records them in the families above.

    ``bucket`` is the component's client-side QPS limit (None: unlimited); every client of a component
    shares this object, so the limit holds for all of them together, as client-go's per-config limiter.
    """

    host: str
    bucket: TokenBucket | None = None

    async def throttle(self, verb: str) -> None:
        """Wait for the bucket (if any) to grant a request and record the wait, zero included."""
        if self.bucket is None:
            return
        clock = self.bucket.clock  # the wait is the bucket's, on the clock it reserves against
        started = clock()
        delay = self.bucket.reserve()
        if delay > 0:
            await asyncio.sleep(delay)
        RATE_LIMITER_DURATION.labels(verb=verb, host=self.host).observe(clock() - started)

    def result(self, method: str, code: int | None) -> None:
        """Count one request by its HTTP status (``None``: no response, a transport error)."""
        label = TRANSPORT_ERROR if code is None else str(code)
        REQUESTS.labels(code=label, method=method, host=self.host).inc()

    def completed(self, verb: str, seconds: float, *, sent: int, received: int | None) -> None:
        """Record a finished non-watch request: duration and body sizes (``received=None``: no response)."""
        REQUEST_DURATION.labels(verb=verb, host=self.host).observe(seconds)
        REQUEST_SIZE.labels(verb=verb, host=self.host).observe(sent)
        if received is not None:
            RESPONSE_SIZE.labels(verb=verb, host=self.host).observe(received)
