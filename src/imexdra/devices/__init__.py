"""Hardware boundary: NVML, /proc/devices and the nvidia-imex process, behind Protocols with fakes.

- ``nvml``: the ``Nvml`` Protocol, GPU/fabric types, NVML errors and the clique-ID rules;
  ``nvml_real`` (pynvml, the only backend components use) and ``nvml_fake`` (a node file, for unit
  tests) implement it.
- ``procfs``: the ``ImexDevices`` Protocol (IMEX channel and fabric-imex-mgmt device nodes) read from
  procfs; ``procfs_fake`` writes the files a simulated node points it at.
- ``devnodes``: the NVIDIA device nodes under a dev root (for the base CDI spec).
- ``driverroot``: locating driver files (NVML library, ``nvidia-smi``, ``nvidia-imex-ctl``);
  ``driverroot_fake`` writes a simulated node's driver root (mock NVML library and its profile, device
  node stand-ins) and ``/proc/devices``.
- ``imex``: the ``Imex`` Protocol (start/signal/stop/wait the nvidia-imex child, ``nvidia-imex-ctl -q``
  query); ``imex_real`` runs the binaries, ``imex_fake`` is in-memory; ``fakeimex`` holds simulated
  ``nvidia-imex``/``nvidia-imex-ctl`` programs for simulated nodes.

Only ``imexdra.common`` and ``imexdra.api`` may be imported from here.
"""
