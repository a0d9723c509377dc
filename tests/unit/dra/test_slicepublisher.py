"""Cutting a pool into ResourceSlices the API accepts and naming them (docs/channel-isolation.md §5)."""

from imexdra.dra.slicepublisher import MAX_DEVICES_PER_SLICE, slice_name_prefix, split_devices
from imexdra.kubeletplugin.slices import slice_devices

CHANNEL_0 = {"name": "channel-0", "attributes": {"type": {"string": "channel"}, "id": {"int": 0}}}
DAEMON_0 = {"name": "daemon-0", "attributes": {"type": {"string": "daemon"}, "id": {"int": 0}}}


def test_split_devices_into_slices_the_api_accepts() -> None:
    """2047 devices make 16 slices of at most 128 in order; a short list one slice; none one empty slice."""
    devices = slice_devices(host_managed=True, channel_isolation=True)
    slices = split_devices(devices)
    assert [len(s) for s in slices] == [MAX_DEVICES_PER_SLICE] * 15 + [127]
    assert [d for s in slices for d in s] == devices
    assert split_devices([CHANNEL_0, DAEMON_0]) == [[CHANNEL_0, DAEMON_0]]
    assert split_devices([]) == [[]]


def test_slice_name_prefix() -> None:
    """Slice i's name starts with i as five lowercase hex digits (upstream's %05x)."""
    assert [slice_name_prefix(i) for i in (0, 15, 16)] == ["00000-", "0000f-", "00010-"]
