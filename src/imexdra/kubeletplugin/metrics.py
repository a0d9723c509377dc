"""The kubelet plugin's Prometheus metrics, upstream's names and labels (docs/compatibility.md §2.10).

Served with the shared machinery's metrics (``imexdra.common.observability.metrics``) from the
default registry:

- ``nvidia_dra_requests_total{driver,operation}`` — successful prepare/unprepare calls;
- ``nvidia_dra_request_duration_seconds{driver,operation}`` — call latency (buckets 0.05 s x 2^0..8);
- ``nvidia_dra_requests_inflight{driver,operation}``;
- ``nvidia_dra_prepared_devices{node,driver,device_type}`` — from the checkpoint after every write;
- ``nvidia_dra_node_prepare_errors_total`` / ``..._unprepare_errors_total{driver,error_type}``.
"""

from __future__ import annotations

from collections import Counter as Tally

from prometheus_client import Counter, Gauge, Histogram

from imexdra.api.constants import DRIVER_NAME
from imexdra.kubeletplugin.checkpoint.model import Checkpoint, ClaimState

OPERATION_PREPARE = "prepare"
OPERATION_UNPREPARE = "unprepare"
ERROR_LOCK_ACQUIRE = "lock_acquire"
ERROR_PREPARE_DEVICES = "prepare_devices"
ERROR_UNPREPARE_DEVICES = "unprepare_devices"
DEVICE_TYPES = ("channel", "daemon", "unknown")

REQUESTS = Counter("nvidia_dra_requests_total", "Successful DRA node requests.", ["driver", "operation"])
REQUEST_DURATION = Histogram(
    "nvidia_dra_request_duration_seconds",
    "Duration of DRA node requests.",
    ["driver", "operation"],
    buckets=tuple(0.05 * 2**k for k in range(9)),
)
REQUESTS_INFLIGHT = Gauge(
    "nvidia_dra_requests_inflight", "DRA node requests being served.", ["driver", "operation"]
)
PREPARED_DEVICES = Gauge(
    "nvidia_dra_prepared_devices", "Devices of completely prepared claims.", ["node", "driver", "device_type"]
)
PREPARE_ERRORS = Counter(
    "nvidia_dra_node_prepare_errors", "Failed claim prepare attempts.", ["driver", "error_type"]
)
UNPREPARE_ERRORS = Counter(
    "nvidia_dra_node_unprepare_errors", "Failed claim unprepare attempts.", ["driver", "error_type"]
)


def sync_prepared_devices(node_name: str, checkpoint: Checkpoint) -> None:
    """Set ``prepared_devices`` from the PrepareCompleted claims of ``checkpoint``."""
    counts: Tally[str] = Tally()
    for claim in checkpoint.claims.values():
        if claim.state == ClaimState.PREPARE_COMPLETED:
            counts.update(device.type.value for device in claim.all_devices())
    for device_type in DEVICE_TYPES:
        PREPARED_DEVICES.labels(node=node_name, driver=DRIVER_NAME, device_type=device_type).set(
            counts[device_type]
        )
