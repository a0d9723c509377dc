"""Machinery shared by every component; it imports no other imexdra package.

``kube`` (the API client factory and error mapping), ``informer`` + ``store`` (watch-based caches),
``workqueue`` (keyed rate-limited queue and workers), ``leaderelection`` (Lease), ``events`` (aggregated
Kubernetes Events), ``metrics`` (Prometheus and /healthz, /readyz), ``logging`` (structlog setup),
``tasks`` (signals and supervision), ``ratelimit`` (backoff and token buckets), ``errors``, ``flock``
and ``atomicfile``.
"""
