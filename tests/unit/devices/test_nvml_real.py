"""The pynvml backend's translation layer, driven by a stand-in pynvml module (no GPU here).

The stand-in mimics only the pynvml surface the backend touches: NVMLError with ``.value``, the
fabric-info struct filled through a pointer, init/shutdown. It checks our mapping, not NVML itself.
"""

import ctypes
import sys
import threading
import types
from collections.abc import Iterator
from typing import Any

import pytest

from imexdra.devices.nvml import (
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_NOT_SUPPORTED,
    FabricState,
    NvmlError,
    clique_id,
)
from imexdra.devices.nvml_real import PynvmlNvml

CLUSTER = bytes(range(1, 17))


class _NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(f"code {value}")
        self.value = value


class _FabricInfo(ctypes.Structure):
    _fields_ = [
        ("clusterUuid", ctypes.c_uint8 * 16),
        ("status", ctypes.c_uint),
        ("cliqueId", ctypes.c_uint32),
        ("state", ctypes.c_uint8),
    ]


def make_pynvml(fabric_codes: list[int], init_code: int = 0) -> Any:
    module: Any = types.ModuleType("pynvml")
    module.calls = []
    module.NVMLError = _NVMLError
    module.NVML_INIT_FLAG_NO_GPUS = 1
    module.libLoadLock = threading.Lock()
    module.nvmlLib = None
    module.c_nvmlGpuFabricInfo_t = _FabricInfo

    def init(flags: int) -> None:
        module.calls.append(("init", flags))
        if init_code:
            raise _NVMLError(init_code)

    def fabric_info(handle: int, pointer: Any) -> int:
        code = fabric_codes[handle]
        if code:
            raise _NVMLError(code)
        info = ctypes.cast(pointer, ctypes.POINTER(_FabricInfo)).contents
        info.clusterUuid[:] = list(CLUSTER)
        info.cliqueId = 9
        info.state = FabricState.COMPLETED
        return 0

    module.nvmlInitWithFlags = init
    module.nvmlShutdown = lambda: module.calls.append(("shutdown",))
    module.nvmlDeviceGetCount = lambda: len(fabric_codes)
    module.nvmlDeviceGetHandleByIndex = lambda index: index
    module.nvmlDeviceGetUUID = lambda handle: f"GPU-{handle}"
    module.nvmlDeviceGetName = lambda handle: "NVIDIA GB200"
    module.nvmlDeviceGetGpuFabricInfo = fabric_info
    module.nvmlSystemGetDriverVersion = lambda: "570.170.01"
    return module


@pytest.fixture
def install(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    def _install(module: Any) -> Any:
        monkeypatch.setitem(sys.modules, "pynvml", module)
        return module

    yield _install


def test_gpus_and_fabric_mapping(install: Any) -> None:
    """Fabric structs become FabricInfo; NOT_SUPPORTED becomes None; NVML is shut down afterwards."""
    module = install(make_pynvml([0, NVML_ERROR_NOT_SUPPORTED]))
    gpus = PynvmlNvml().gpus()
    assert [g.uuid for g in gpus] == ["GPU-0", "GPU-1"]
    assert gpus[0].fabric is not None and gpus[0].fabric.cluster_uuid == CLUSTER
    assert gpus[1].fabric is None
    assert clique_id(gpus) == "01020304-0506-0708-090a-0b0c0d0e0f10.9"
    assert module.calls == [("init", 1), ("shutdown",)]


def test_fabric_failure_is_wrapped_and_shuts_down(install: Any) -> None:
    """Another fabric-info failure is an NvmlError, and NVML is still shut down."""
    module = install(make_pynvml([NVML_ERROR_DRIVER_NOT_LOADED]))
    with pytest.raises(NvmlError, match="nvmlDeviceGetGpuFabricInfo") as caught:
        PynvmlNvml().gpus()
    assert caught.value.code == NVML_ERROR_DRIVER_NOT_LOADED
    assert module.calls[-1] == ("shutdown",)


def test_init_failure_is_wrapped(install: Any) -> None:
    """A failing nvmlInit surfaces as NvmlError without a shutdown call."""
    module = install(make_pynvml([], init_code=NVML_ERROR_DRIVER_NOT_LOADED))
    with pytest.raises(NvmlError, match="nvmlInitWithFlags"):
        PynvmlNvml().driver_version()
    assert module.calls == [("init", 1)]
