"""The one test toolkit every tier draws on; no test module imports another test module.

- ``waiting``: polling until a condition holds (``eventually`` on the event loop, ``wait_until``
  blocking), failing the test with what it waited for, and ``stays_true`` for a stated window in
  which a condition must keep holding;
- ``kubectl``: applying and reading objects as cluster admin through ``kubectl``;
- ``builders``: the pods tests run against a domain's claim template;
- ``watching``: counting an object's writes through a watch (bounding write storms).

The API objects benchmarks build as well (ComputeDomain, the workload claim template and claims, the
daemon DeviceClass) are in ``imexdra_sim.builders``, so ``bench/`` never imports ``tests``.
"""
