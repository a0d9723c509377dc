"""Hardware boundary: NVML, /proc/devices and the nvidia-imex process, behind Protocols.

- ``nvml``: the ``Nvml`` Protocol, GPU/fabric types, NVML errors and the clique-ID rules;
  ``nvml_real`` (pynvml, the only backend components use) implements it.
- ``procfs``: the ``ImexDevices`` Protocol (IMEX channel and fabric-imex-mgmt device nodes) read from
  procfs.
- ``devnodes``: the NVIDIA device nodes under a dev root (for the base CDI spec).
- ``driverroot``: locating driver files (NVML library, ``nvidia-smi``, ``nvidia-imex-ctl``).
- ``imex``: the ``Imex`` Protocol (start/signal/stop/wait the nvidia-imex child, ``nvidia-imex-ctl -q``
  query); ``imex_real`` runs the binaries.
- ``hostimex``: the host's own nvidia-imex under HostManagedIMEX, asked through its command socket.

The fakes of these Protocols and the files of a simulated node's driver root are test equipment and
live in ``imexdra_sim.devices`` (sim/), outside what the driver ships. Only ``imexdra.common`` and
``imexdra.api`` may be imported from here.
"""
