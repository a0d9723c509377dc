#!/usr/bin/env python3
"""A stand-in for a driver install's ``nvidia-smi``: ``-L`` lists the GPUs the node's NVML reports.

Upstream's kubelet plugin requires an ``nvidia-smi`` in the driver root at startup (it locates one as
it locates ``libnvidia-ml.so.1``), so a simulated driver root ships this one (docs/driver-root.md).
It is hardware-boundary equipment like the mock library: it answers from the very same NVML state,
by loading ``../lib64/libnvidia-ml.so.1`` beside its own resolved file through ctypes, and prints
``-L`` in the real tool's format (``GPU <i>: <name> (UUID: <uuid>)``). Anything else it refuses
(exit 2), rather than pretend. Standard library only: it is copied whole into the driver root.
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

BUFFER = 96  # NVML_DEVICE_UUID_V2_BUFFER_SIZE and NVML_DEVICE_NAME_V2_BUFFER_SIZE


def list_gpus(library: Path) -> int:
    """Print each GPU as ``nvidia-smi -L`` does; return the exit status (9: NVML failed, as the tool)."""
    nvml = ctypes.CDLL(str(library))
    if nvml.nvmlInit_v2() != 0:
        print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
        return 9
    try:
        count = ctypes.c_uint()
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0:
            return 9
        for index in range(count.value):
            handle = ctypes.c_void_p()
            name = ctypes.create_string_buffer(BUFFER)
            uuid = ctypes.create_string_buffer(BUFFER)
            if (
                nvml.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle))
                or nvml.nvmlDeviceGetName(handle, name, BUFFER)
                or nvml.nvmlDeviceGetUUID(handle, uuid, BUFFER)
            ):
                return 9
            print(f"GPU {index}: {name.value.decode()} (UUID: {uuid.value.decode()})")
    finally:
        nvml.nvmlShutdown()
    return 0


def main(argv: list[str]) -> int:
    """``-L``/``--list-gpus`` only."""
    if argv not in (["-L"], ["--list-gpus"]):
        print("this simulated nvidia-smi answers -L only", file=sys.stderr)
        return 2
    return list_gpus(Path(__file__).resolve().parent.parent / "lib64" / "libnvidia-ml.so.1")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
