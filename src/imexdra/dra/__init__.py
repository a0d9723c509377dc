"""A DRA kubelet plugin for any driver: the shape of Go's ``dynamic-resource-allocation/kubeletplugin``.

It knows nothing about IMEX; a driver (ours is ``imexdra.kubeletplugin``) implements ``driver.Driver``
and hands this layer its name, its sockets and its devices. Module map (docs/architecture.md §3.2, §9;
docs/data-path.md §5 follows a call through it; docs/compatibility.md §2.7 is the wire contract):

- ``server``: the two gRPC servers on the kubelet's unix sockets, at ``paths``;
  ``registration``: the kubelet's plugin-registration service; ``nodeservice``: the DRA v1 and v1beta1
  ``DRAPlugin`` services over a ``driver.Driver``; ``health``: the gRPC health endpoint that calls both
  sockets as the kubelet does; ``_pb``: the generated stubs (``make protos``).
- ``driver``: the seam — the ``Driver`` and ``ClaimGetter`` Protocols and the per-claim results;
  ``claims``: the ``ClaimGetter`` over the API server.
- ``resourceclaim``: the typed ResourceClaim, decoded once where it enters; ``claimstatus`` and
  ``gojson``: a claim status and JSON bytes exactly as Go marshals them.
- ``slicepublisher``: keeps a node's pool of ResourceSlices of one driver published.
"""
