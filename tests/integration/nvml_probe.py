"""Child process of test_nvml_real.py: drives ``PynvmlNvml`` over one library file and reports.

Run as ``python nvml_probe.py REQUEST.json``. The request names the library, the JSON file to write the
outcomes to (stdout is left to the code under test, whose logs go there) and a list of steps:

- ``{"call": "gpus" | "driver_version" | "clique_id", "strict": bool, "tolerate_incomplete": bool}``
- ``{"write": PATH, "text": TEXT}`` — rewrite a file (a profile) between two calls
- ``{"resolved": true}`` — the C symbols pynvml has looked up in the library so far

Each call's outcome is ``{"value": ...}`` or ``{"error": {type, code, permanent, message}}``, plus
``session_open``: whether NVML still answers after the call returned (True), answers "uninitialised"
(False), or could not be asked at all (None).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pynvml

from imexdra.common.errors import DriverError, is_permanent
from imexdra.devices.nvml import Gpu, clique_id
from imexdra.devices.nvml_real import PynvmlNvml


def main() -> None:
    request = json.loads(Path(sys.argv[1]).read_text())
    backend = PynvmlNvml(library_path=Path(request["library"]))
    outcomes: list[Any] = []
    for step in request["steps"]:
        if "write" in step:
            Path(step["write"]).write_text(step["text"])
        elif "resolved" in step:
            # pynvml's own cache of dlsym results: exactly the entry points it asked the library for.
            outcomes.append(sorted(pynvml._nvmlGetFunctionPointer_cache))
        else:
            outcomes.append({**_call(backend, step), "session_open": _session_open()})
    Path(request["out"]).write_text(json.dumps(outcomes))


def _call(backend: PynvmlNvml, step: dict[str, Any]) -> dict[str, Any]:
    try:
        if step["call"] == "gpus":
            return {"value": [_gpu_json(gpu) for gpu in backend.gpus()]}
        if step["call"] == "driver_version":
            return {"value": backend.driver_version()}
        options = {key: step[key] for key in ("strict", "tolerate_incomplete") if key in step}
        return {"value": clique_id(backend.gpus(), **options)}
    except DriverError as error:
        return {
            "error": {
                "type": type(error).__name__,
                "code": getattr(error, "code", None),
                "permanent": is_permanent(error),
                "message": str(error),
            }
        }


def _gpu_json(gpu: Gpu) -> dict[str, Any]:
    fabric = gpu.fabric
    return {
        "index": gpu.index,
        "uuid": gpu.uuid,
        "name": gpu.name,
        "fabric": None
        if fabric is None
        else {
            "cluster_uuid": fabric.cluster_uuid.hex(),
            "clique_id": fabric.clique_id,
            "state": fabric.state,
            "status": fabric.status,
        },
    }


def _session_open() -> bool | None:
    try:
        pynvml.nvmlDeviceGetCount()
    except pynvml.NVMLError as error:
        return False if error.value == pynvml.NVML_ERROR_UNINITIALIZED and pynvml.nvmlLib else None
    return True


if __name__ == "__main__":
    main()
