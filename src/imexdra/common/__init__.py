"""What every component shares and nothing IMEX-specific; it imports no other imexdra package.

One room per purpose, each importing only the rooms below it (docs/architecture.md §2.1; import-linter
holds the order):

- ``machinery``: client-go's controller machinery (informer and store, work queue, leader election,
  Events), on the API client;
- ``kube``: the one Kubernetes API client (the ``KubeApi`` Protocol, the typed client, its transport,
  connection, credentials, proxy and ``rest_client_*`` metrics);
- ``observability``: logging, klog verbosity, Prometheus metrics and the /metrics server, profiling;
- the base rooms, which know nothing of Kubernetes: ``files`` (cross-process lock, atomic
  replacement), ``process`` (signals, supervised tasks, PID 1, the termination message), ``pacing``
  (backoff, token buckets, waking on a change) and ``errors`` (the error tree).
"""
