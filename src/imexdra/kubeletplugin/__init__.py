"""The per-node DRA kubelet plugin for IMEX channels (driver ``compute-domain.nvidia.com``).

Module map (docs/data-path.md follows one claim through these modules, §10 there for HostManagedIMEX;
docs/compatibility.md is the contract with upstream):

- ``main``: the ``compute-domain-kubelet-plugin`` command; ``plugin``: startup, services, shutdown;
  ``hardware``: NVML / procfs / dev-root backends (real or simulated) and the clique ID.
- The kubelet-facing machinery is the DRA layer's (``imexdra.dra``: gRPC servers, registration,
  v1/v1beta1 services, health, the typed claim, ResourceSlice publishing); this package is the driver
  on top of it. ``metrics``: upstream's ``nvidia_dra_*`` metrics.
- ``driver``: the ``ImexDriver`` (``imexdra.dra.driver.Driver``) — ``pu.lock`` per attempt, error
  classes — with ``retries`` (45 s budget, upstream backoff); ``devicestate``: prepare/unprepare of
  one claim; ``configs``: a claim's opaque configs — ``configs.claim`` decodes them and their
  precedence, ``configs.apply`` applies channel and daemon claims in both IMEX modes.
- ``domains``: ComputeDomain cache, daemon readiness from cliques/status; ``nodelabels``: node labels;
  ``daemonowners``: who may hold a daemon claim; ``slices``: the devices of the node's ResourceSlice;
  ``cleanup``: stale claims, tombstones and domain directories.
- ``checkpoint``: the Go-compatible prepared-claims checkpoint — ``checkpoint.model`` and its file,
  ``checkpoint.store``.
- ``cdi``: CDI base and per-claim specs — ``cdi.spec`` as data, ``cdi.files`` on disk; ``paths``: the
  on-disk layout;
  ``domaindirs``: the daemons' ``/imexd`` directories, written and removed without following links.
"""
