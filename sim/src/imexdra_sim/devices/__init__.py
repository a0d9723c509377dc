"""Fakes of the hardware behind ``imexdra.devices``' Protocols, for tests and simulated nodes.

- ``nvml_fake``: ``FakeNvml``, an ``Nvml`` answering from a node file (unit tests);
- ``procfs_fake``: writes the ``/proc/devices`` and capability files a simulated node points the
  plugin at (``ALT_PROC_DEVICES_PATH``);
- ``driverroot_fake``: writes a simulated node's driver root (mock NVML library and its profile,
  device node stand-ins, the fake IMEX programs) and ``/proc/devices``;
- ``nvidia_smi_fake``: the driver root's ``nvidia-smi`` stand-in (``-L`` from the mock NVML);
- ``imex_fake``: ``FakeImex``, an in-memory ``Imex``; ``fakeimex``: the simulated ``nvidia-imex`` and
  ``nvidia-imex-ctl`` programs, networked like the real ones.
"""
