"""Reference checkpoint files and the claims they hold (docs/compatibility.md §2.5).

The checkpoint tests compare against them byte for byte; the checkpoint fuzz and file-mode tests start
from them.
"""

import json

from imexdra.api.constants import DeviceType
from imexdra.dra.claimstatus import canonical_claim_status
from imexdra.kubeletplugin.checkpoint.model import (
    CheckpointedDevice,
    ClaimState,
    ConfigState,
    PreparedClaim,
    PreparedDevice,
    PreparedDeviceGroup,
)

BOOT_ID = "3f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"
UID = "0b9e7c1a-1111-2222-3333-444455556666"
CD_UID = "5f0c2c7e-aaaa-bbbb-cccc-0123456789ab"
EMPTY_FILE = (
    b'{"checksum":1083090442,"v1":{},"v2":{"checksum":719341321,'
    b'"nodeBootID":"3f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"}}'
)
# The v1 section of an illustrative non-empty upstream file, with the top-level checksum upstream gives.
V1_86 = (
    '{"preparedClaims":{"' + UID + '":{"status":{"allocation":{"devices":{"results":[{"request":"channel",'
    '"driver":"compute-domain.nvidia.com","pool":"node-a","device":"channel-0"}],"config":[{"source":"FromClaim",'
    '"requests":["channel"],"opaque":{"driver":"compute-domain.nvidia.com","parameters":{"allocationMode":"Single",'
    '"apiVersion":"resource.nvidia.com/v1beta1","domainID":"'
    + CD_UID
    + '","kind":"ComputeDomainChannelConfig"}}}]},'
    '"nodeSelector":{"nodeSelectorTerms":[{"matchFields":[{"key":"metadata.name","operator":"In","values":["node-a"]}]}]},'
    '"allocationTimestamp":"2026-01-02T03:04:05Z"},"reservedFor":[{"resource":"pods","name":"worker-0",'
    '"uid":"9d7e0f5a-1111-4222-8333-444455556666"}]},"preparedDevices":[{"devices":[{"channel":{"info":{"id":0},'
    '"device":{"Requests":["channel"],"PoolName":"node-a","DeviceName":"channel-0","CDIDeviceIDs":'
    '["k8s.compute-domain.nvidia.com/claim='
    + UID
    + '-channel-0"]}},"daemon":null}],"configState":{"Type":"channel",'
    '"ComputeDomain":"' + CD_UID + '"}}]}}}'
)


def channel_group(uid: str = UID, cdi_ids: tuple[str, ...] | None = None) -> PreparedDeviceGroup:
    ids = cdi_ids if cdi_ids is not None else (f"k8s.compute-domain.nvidia.com/claim={uid}-channel-0",)
    record = CheckpointedDevice(
        requests=("channel",), pool_name="node-a", device_name="channel-0", cdi_device_ids=ids
    )
    return PreparedDeviceGroup(
        devices=(PreparedDevice(type=DeviceType.CHANNEL, id=0, device=record),),
        config_state=ConfigState(type="channel", compute_domain=CD_UID),
    )


def claim_86() -> PreparedClaim:
    status = json.loads(V1_86)["preparedClaims"][UID]["status"]
    return PreparedClaim(
        state=ClaimState.PREPARE_COMPLETED,
        status=canonical_claim_status(status),
        prepared_devices=(channel_group(),),
        name="worker-0-channel-abcde",
        namespace="default",
    )
