"""Test and demo equipment for imexdra; never shipped with the driver (docs/architecture.md §2.3).

- ``localcluster``: the real local control plane (etcd, kube-apiserver, scheduler, controller manager,
  kubelets on fakecri or containerd) the tests, the demo and the benchmarks run against;
- ``devices``: the hardware fakes behind ``imexdra.devices``' Protocols and the files a simulated node's
  driver root holds, among them the fake ``nvidia-imex``/``nvidia-imex-ctl`` programs;
- ``rack`` and ``demo``: a simulated GB200 NVL72 rack with imexdra installed by its chart, and
  ``imexdra demo`` on it (``cli`` registers the command).

This package may import ``imexdra``; ``imexdra`` never imports it (an import-linter contract).
"""
