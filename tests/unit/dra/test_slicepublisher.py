"""Cutting a pool into ResourceSlices the API accepts, naming them (docs/channel-isolation.md §5), and
what makes a published slice differ from the wanted one."""

from imexdra.api.imexmode import DRIVER_MANAGED_IMEX, HOST_MANAGED_IMEX
from imexdra.common.kube.models.resource_v1 import ResourceSliceSpec
from imexdra.dra.slicepublisher import MAX_DEVICES_PER_SLICE, essentials, slice_name_prefix, split_devices
from imexdra.kubeletplugin.slices import slice_devices

CHANNEL_0 = {"name": "channel-0", "attributes": {"type": {"string": "channel"}, "id": {"int": 0}}}
DAEMON_0 = {"name": "daemon-0", "attributes": {"type": {"string": "daemon"}, "id": {"int": 0}}}


def test_split_devices_into_slices_the_api_accepts() -> None:
    """2047 devices make 16 slices of at most 128 in order; a short list one slice; none one empty slice."""
    devices = slice_devices(imex=HOST_MANAGED_IMEX, channel_isolation=True)
    slices = split_devices(devices)
    assert [len(s) for s in slices] == [MAX_DEVICES_PER_SLICE] * 15 + [127]
    assert [d for s in slices for d in s] == devices
    assert split_devices([CHANNEL_0, DAEMON_0]) == [[CHANNEL_0, DAEMON_0]]
    assert split_devices([]) == [[]]


def test_slice_name_prefix() -> None:
    """Slice i's name starts with i as five lowercase hex digits (upstream's %05x)."""
    assert [slice_name_prefix(i) for i in (0, 15, 16)] == ["00000-", "0000f-", "00010-"]


def test_a_slice_differs_when_only_the_binding_conditions_do() -> None:
    """The gate turned on (or off) rewrites the node's slice: binding conditions are compared too."""
    pool = {"name": "node-a", "generation": 1, "resourceSliceCount": 1}

    def spec(devices: list[dict[str, object]]) -> dict[str, object]:
        wanted = {
            "driver": "compute-domain.nvidia.com",
            "pool": pool,
            "nodeName": "node-a",
            "devices": devices,
        }
        published: dict[str, object] = ResourceSliceSpec.from_dict(wanted).to_dict()  # as the API returns it
        return published

    plain = slice_devices(imex=DRIVER_MANAGED_IMEX)
    marked = slice_devices(imex=DRIVER_MANAGED_IMEX, binding_conditions=True)
    assert essentials(spec(plain)) == essentials(spec(slice_devices(imex=DRIVER_MANAGED_IMEX)))
    assert essentials(spec(plain)) != essentials(spec(marked))
    assert essentials(spec(marked)) != essentials(spec(plain))
