"""A fake NVML for unit tests: a GB200 compute tray described by a small file.

No component selects it: the kubelet plugin always reads NVML through ``nvml_real`` and nvidia-ml-py,
on a simulated node from the mock ``libnvidia-ml.so.1`` in its driver root (docs/driver-root.md). This
fake serves unit tests of the code above the ``Nvml`` Protocol (clique rules, refresh, fuzzing) that
need no C library. The file (JSON or YAML; JSON is valid YAML) is re-read on every call, so a test can
change the fabric between calls. File format, all keys optional::

    driverVersion: "570.170.01"   # nvmlSystemGetDriverVersion (default 570.170.01)
    nodeName: node-a              # seeds the generated GPU UUIDs (default: the file's path)
    gpuCount: 4                   # GPUs in the tray (default 4, as on a GB200 compute tray)
    gpuName: NVIDIA GB200         # nvmlDeviceGetName for every GPU
    initError: DRIVER_NOT_LOADED  # make every call fail as nvmlInit would (NVML error name)
    fabric:                       # omitted or null: fabric info is NOT_SUPPORTED => no clique
      clusterUUID: 7c9a3e1f-0d2b-4c5e-8f6a-1b2c3d4e5f60   # all zeros = NVLink but no multi-node fabric
      cliqueID: 32766
      state: completed            # notSupported | notStarted | inProgress | completed (default)
      status: 0                   # NVML code of the fabric registration (default 0 = success)
    gpus:                         # optional per-GPU list; replaces gpuCount
      - uuid: GPU-...             # default: generated from nodeName and index
        name: NVIDIA GB200        # default: gpuName
        fabric: {...} | null      # default: the top-level fabric; null = NOT_SUPPORTED for this GPU

With that file the node's clique ID is ``7c9a3e1f-0d2b-4c5e-8f6a-1b2c3d4e5f60.32766``. Unknown keys
are rejected (a typo must not silently produce a node without fabric).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Literal

import msgspec
import yaml

from imexdra.common.errors import ConfigError
from imexdra.devices.nvml import (
    NVML_ERROR_DRIVER_NOT_LOADED,
    NVML_ERROR_GPU_IS_LOST,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    NVML_ERROR_NO_PERMISSION,
    NVML_ERROR_UNKNOWN,
    FabricInfo,
    FabricState,
    Gpu,
    nvml_error,
)

DEFAULT_DRIVER_VERSION = "570.170.01"
DEFAULT_GPU_COUNT = 4
DEFAULT_GPU_NAME = "NVIDIA GB200"

_STATES: dict[str, FabricState] = {
    "notSupported": FabricState.NOT_SUPPORTED,
    "notStarted": FabricState.NOT_STARTED,
    "inProgress": FabricState.IN_PROGRESS,
    "completed": FabricState.COMPLETED,
}

_INIT_ERRORS: dict[str, int] = {
    "DRIVER_NOT_LOADED": NVML_ERROR_DRIVER_NOT_LOADED,
    "LIBRARY_NOT_FOUND": NVML_ERROR_LIBRARY_NOT_FOUND,
    "NO_PERMISSION": NVML_ERROR_NO_PERMISSION,
    "GPU_IS_LOST": NVML_ERROR_GPU_IS_LOST,
    "UNKNOWN": NVML_ERROR_UNKNOWN,
}

_FabricStateName = Literal["notSupported", "notStarted", "inProgress", "completed"]
_InitErrorName = Literal["DRIVER_NOT_LOADED", "LIBRARY_NOT_FOUND", "NO_PERMISSION", "GPU_IS_LOST", "UNKNOWN"]


class _Fabric(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    cluster_uuid: str = msgspec.field(name="clusterUUID")
    clique_id: int = msgspec.field(name="cliqueID")
    state: _FabricStateName = "completed"
    status: int = 0


class _GpuSpec(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    uuid: str | None = None
    name: str | None = None
    fabric: _Fabric | msgspec.UnsetType | None = msgspec.UNSET


class _NodeSpec(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    driver_version: str = DEFAULT_DRIVER_VERSION
    node_name: str | None = None
    gpu_count: int = DEFAULT_GPU_COUNT
    gpu_name: str = DEFAULT_GPU_NAME
    init_error: _InitErrorName | None = None
    fabric: _Fabric | None = None
    gpus: list[_GpuSpec] | None = None


class FakeNvml:
    """``Nvml`` answering from the node file at ``config_path`` (format in the module docstring)."""

    def __init__(self, config_path: Path) -> None:
        self._config_path = config_path

    def gpus(self) -> list[Gpu]:
        """The node's GPUs as the file describes them."""
        spec = self._load()
        seed = spec.node_name or str(self._config_path.resolve())
        gpu_specs = spec.gpus if spec.gpus is not None else [_GpuSpec() for _ in range(spec.gpu_count)]
        return [
            Gpu(
                index=index,
                uuid=gpu.uuid or f"GPU-{uuid.uuid5(uuid.NAMESPACE_URL, f'imexdra-fake-gpu/{seed}/{index}')}",
                name=gpu.name or spec.gpu_name,
                fabric=self._fabric(spec.fabric if isinstance(gpu.fabric, msgspec.UnsetType) else gpu.fabric),
            )
            for index, gpu in enumerate(gpu_specs)
        ]

    def driver_version(self) -> str:
        """The configured driver version."""
        return self._load().driver_version

    def _fabric(self, fabric: _Fabric | None) -> FabricInfo | None:
        if fabric is None:
            return None
        try:
            cluster = uuid.UUID(fabric.cluster_uuid)
        except ValueError as error:
            raise ConfigError(
                f"{self._config_path}: not a UUID: {fabric.cluster_uuid!r}", field="fabric.clusterUUID"
            ) from error
        return FabricInfo(
            cluster_uuid=cluster.bytes,
            clique_id=fabric.clique_id,
            state=_STATES[fabric.state],
            status=fabric.status,
        )

    def _load(self) -> _NodeSpec:
        try:
            raw = yaml.safe_load(self._config_path.read_text(encoding="utf-8"))
        except OSError as error:
            raise ConfigError(f"cannot read fake NVML file {self._config_path}: {error}") from error
        except (yaml.YAMLError, ValueError, RecursionError) as error:
            # PyYAML raises ValueError for impossible timestamps (2001-02-30) and recursion for deep nesting.
            raise ConfigError(f"fake NVML file {self._config_path} is not YAML/JSON: {error}") from error
        try:
            spec = msgspec.convert(raw if raw is not None else {}, _NodeSpec)
            # PyYAML reads a JSON surrogate-pair escape ("\ud800\udc00") as two lone surrogates.
            msgspec.json.encode(spec)
        except (msgspec.ValidationError, UnicodeEncodeError, RecursionError) as error:
            raise ConfigError(f"invalid fake NVML file {self._config_path}: {error}") from error
        if spec.init_error is not None:
            raise nvml_error("nvmlInitWithFlags", _INIT_ERRORS[spec.init_error], f"{spec.init_error} (fake)")
        return spec
