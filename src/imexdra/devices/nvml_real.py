"""The real NVML backend, over nvidia-ml-py (``import pynvml``), for GPU hosts.

``pynvml`` is imported lazily inside each call so that importing this module (and the whole plugin)
works on machines without the NVIDIA driver. Every NVML failure is re-raised as one of the errors in
``imexdra.devices.nvml``; nothing from pynvml escapes. Like upstream, each call initialises NVML with
``INIT_FLAG_NO_GPUS`` and shuts it down again, so a long-running process holds no NVML state.

``library_path`` points NVML at a specific ``libnvidia-ml.so.1`` (upstream finds it under the
container driver root, see ``driverroot.find_nvml_library``); pynvml otherwise loads it by soname.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from imexdra.devices.nvml import (
    NVML_ERROR_LIBRARY_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    FabricInfo,
    Gpu,
    nvml_error,
)

_T = TypeVar("_T")


class PynvmlNvml:
    """``Nvml`` backed by the host's ``libnvidia-ml.so.1``."""

    def __init__(self, *, library_path: Path | None = None) -> None:
        self._library_path = library_path

    @property
    def library_path(self) -> Path | None:
        """The library file this backend loads (None: ``libnvidia-ml.so.1`` by soname)."""
        return self._library_path

    def gpus(self) -> list[Gpu]:
        """Enumerate GPUs by index with UUID, name and fabric info."""
        with self._session() as pynvml:
            count: int = _call(pynvml, "nvmlDeviceGetCount", pynvml.nvmlDeviceGetCount)
            return [self._gpu(pynvml, index) for index in range(count)]

    def driver_version(self) -> str:
        """``nvmlSystemGetDriverVersion``."""
        with self._session() as pynvml:
            return str(_call(pynvml, "nvmlSystemGetDriverVersion", pynvml.nvmlSystemGetDriverVersion))

    def _gpu(self, pynvml: Any, index: int) -> Gpu:
        handle = _call(pynvml, "nvmlDeviceGetHandleByIndex", pynvml.nvmlDeviceGetHandleByIndex, index)
        gpu_uuid = str(_call(pynvml, "nvmlDeviceGetUUID", pynvml.nvmlDeviceGetUUID, handle))
        name = str(_call(pynvml, "nvmlDeviceGetName", pynvml.nvmlDeviceGetName, handle))
        return Gpu(index=index, uuid=gpu_uuid, name=name, fabric=_fabric_info(pynvml, handle))

    @contextlib.contextmanager
    def _session(self) -> Iterator[Any]:
        try:
            import pynvml
        except ImportError as error:  # pragma: no cover - nvidia-ml-py is a pinned dependency
            raise nvml_error("import", NVML_ERROR_LIBRARY_NOT_FOUND, str(error)) from error
        if self._library_path is not None:
            _preload_library(pynvml, self._library_path)
        _call(pynvml, "nvmlInitWithFlags", pynvml.nvmlInitWithFlags, pynvml.NVML_INIT_FLAG_NO_GPUS)
        try:
            yield pynvml
        finally:
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlShutdown()


def _fabric_info(pynvml: Any, handle: Any) -> FabricInfo | None:
    info = pynvml.c_nvmlGpuFabricInfo_t()
    try:
        pynvml.nvmlDeviceGetGpuFabricInfo(handle, ctypes.byref(info))
    except pynvml.NVMLError as error:
        if error.value == NVML_ERROR_NOT_SUPPORTED:
            return None
        raise nvml_error("nvmlDeviceGetGpuFabricInfo", int(error.value), str(error)) from error
    return FabricInfo(
        cluster_uuid=bytes(info.clusterUuid),
        clique_id=int(info.cliqueId),
        state=int(info.state),
        status=int(info.status),
    )


def _call(pynvml: Any, operation: str, function: Callable[..., _T], *args: Any) -> _T:
    try:
        return function(*args)
    except pynvml.NVMLError as error:
        raise nvml_error(operation, int(error.value), str(error)) from error


def _preload_library(pynvml: Any, library_path: Path) -> None:
    # pynvml loads "libnvidia-ml.so.1" by soname on first init unless its module-level handle is
    # already set; setting it under pynvml's own lock is the supported way to pick a specific file.
    with pynvml.libLoadLock:
        if pynvml.nvmlLib is None:
            try:
                pynvml.nvmlLib = ctypes.CDLL(str(library_path))
            except OSError as error:
                raise nvml_error(f"load {library_path}", NVML_ERROR_LIBRARY_NOT_FOUND, str(error)) from error
