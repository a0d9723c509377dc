"""Fuzzing the hardware answers: ``/proc/devices`` texts, capability files and fake NVML answers.

- ``/proc/devices``: line soup of section headers, entries (ASCII and non-ASCII digits, huge
  majors, look-alike names) and noise gives a major in int32 range that the text really announces,
  or a ``DeviceDiscoveryError``; a valid entry put first in the character section always wins.
- capability files and ``HostImexDevices`` over random files: device info or ``DeviceDiscoveryError``.
- NVML: random GPU lists (odd fabric states and statuses, zero and random cluster UUIDs, clique IDs
  outside uint32, empty UUIDs and names) give a clique ID built from one completed GPU, or a
  ``FabricError``/``FabricNotReadyError``; random fake-NVML node files give GPUs or a ``DriverError``.
"""

from __future__ import annotations

import asyncio
import json
import re
import tempfile
import uuid
from pathlib import Path

import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from imexdra.api.featuregates import resolve_feature_gates
from imexdra.common.errors import DriverError
from imexdra.devices.nvml import FabricInfo, FabricState, Gpu, clique_id
from imexdra.devices.procfs import (
    IMEX_CHANNELS_DEVICE,
    NVIDIA_CAPS_DEVICE,
    DeviceDiscoveryError,
    HostImexDevices,
    parse_char_device_major,
    parse_nvcap_info,
)
from imexdra.kubeletplugin.hardware import CliqueTracker
from imexdra_sim.devices.nvml_fake import FakeNvml
from tests.unit.fuzz.profiles import fuzz

INT32_MAX = 2**31 - 1
NAMES = [IMEX_CHANNELS_DEVICE, NVIDIA_CAPS_DEVICE, f"{NVIDIA_CAPS_DEVICE}-x", "nvidia", "mem", ""]
digits = st.one_of(
    st.integers(0, 600).map(str),
    st.integers(0, 2**40).map(str),
    st.text(st.sampled_from("0123456789٣๕"), min_size=1, max_size=12),
    st.integers(1, 6000).map(lambda n: "9" * n),
)
entry_lines = st.builds(
    lambda pad, number, name: f"{' ' * pad}{number} {name}", st.integers(0, 3), digits, st.sampled_from(NAMES)
)
proc_lines = st.one_of(
    entry_lines,
    st.sampled_from(["Character devices:", "Block devices:", "", "  7 loop"]),
    st.text(max_size=12),
)
proc_texts = st.lists(proc_lines, max_size=12).map("\n".join)


def announced(text: str, name: str, major: int) -> bool:
    """Whether ``text`` has an entry ``<major> <name>`` after ``Character devices:`` (oracle)."""
    section = text.split("Character devices:", 1)[-1] if "Character devices:" in text else ""
    pattern = re.compile(rf"^[ \t]*0*{major} {re.escape(name)}$", re.MULTILINE)
    return bool(pattern.search(section))


@fuzz(ci=200, soak=12_000)
@given(text=proc_texts, name=st.sampled_from(NAMES[:3]))
@example(text="Character devices:\n" + "9" * 5000 + " nvidia-caps", name=NVIDIA_CAPS_DEVICE)
@example(text="Character devices:\n ٣ nvidia-caps", name=NVIDIA_CAPS_DEVICE)
def test_proc_devices(text: str, name: str) -> None:
    """A major in int32 range that the text announces, or DeviceDiscoveryError (was ValueError)."""
    try:
        major = parse_char_device_major(text, name, source="/proc/devices")
    except DeviceDiscoveryError:
        return
    assert 0 <= major <= INT32_MAX
    assert announced(text, name, major)


@fuzz(ci=100, soak=6_000)
@given(text=proc_texts, major=st.integers(0, INT32_MAX), name=st.sampled_from(NAMES[:3]))
def test_first_entry_in_the_character_section_wins(text: str, major: int, name: str) -> None:
    """Whatever follows, an entry first in the character section is the answer."""
    document = f"Character devices:\n{major:3d} {name}\n{text}"
    assert parse_char_device_major(document, name, source="/proc/devices") == major


capability_texts = st.lists(
    st.one_of(
        st.builds(
            "{}: {}".format,
            st.sampled_from(["DeviceFileMinor", "DeviceFileMode", "DeviceFileModify", "Other"]),
            digits | st.text(max_size=6),
        ),
        st.text(max_size=12),
    ),
    max_size=6,
).map("\n".join)


@fuzz(ci=100, soak=6_000)
@given(proc_devices=proc_texts, capability=capability_texts)
def test_host_imex_devices_over_random_files(proc_devices: str, capability: str) -> None:
    """HostImexDevices over random files: channel and fabric-mgmt nodes, or DeviceDiscoveryError."""
    with tempfile.TemporaryDirectory(prefix="fuzz-procfs-") as root:
        proc = Path(root, "devices")
        proc.write_text(proc_devices, encoding="utf-8")
        cap = Path(root, "fabric-imex-mgmt")
        cap.write_text(capability, encoding="utf-8")
        try:
            devices = HostImexDevices(proc_devices=proc, fabric_mgmt_capability=cap)
        except DeviceDiscoveryError:
            return
        assert devices.channel(2047).minor == 2047
        try:
            fabric = devices.fabric_mgmt()
        except DeviceDiscoveryError:
            return
        assert fabric.minor == parse_nvcap_info(capability, source="x").minor


cluster_uuids = st.sampled_from([bytes(16), b"\xff" * 16, uuid.UUID(int=1).bytes]) | st.binary(
    min_size=16, max_size=16
)
fabrics = st.builds(
    FabricInfo,
    cluster_uuid=cluster_uuids,
    clique_id=st.sampled_from([0, 32766, 2**32 - 1]) | st.integers(-(2**40), 2**40),
    state=st.sampled_from(list(FabricState)) | st.integers(-3, 9),
    status=st.sampled_from([0, 0, 3, 999]) | st.integers(-5, 2**32),
)
gpus = st.lists(
    st.builds(
        Gpu,
        index=st.integers(0, 7),
        uuid=st.sampled_from(["", "GPU-0"]) | st.text(max_size=8),
        name=st.sampled_from(["NVIDIA GB200", "DGX Display", ""]) | st.text(max_size=8),
        fabric=st.none() | fabrics,
    ),
    max_size=6,
)


@fuzz(ci=200, soak=12_000)
@given(devices=gpus, strict=st.booleans(), tolerate_incomplete=st.booleans())
def test_clique_id_from_any_nvml_answer(devices: list[Gpu], strict: bool, tolerate_incomplete: bool) -> None:
    """A clique ID of one completed, registered GPU's fabric, "" or a fabric DriverError."""
    try:
        found = clique_id(devices, strict=strict, tolerate_incomplete=tolerate_incomplete)
    except DriverError:
        return
    if not found:
        return
    cluster, _, clique = found.rpartition(".")
    assert any(
        gpu.fabric is not None
        and gpu.fabric.state == FabricState.COMPLETED
        and gpu.fabric.status == 0
        and uuid.UUID(cluster).bytes == gpu.fabric.cluster_uuid != bytes(16)
        and int(clique) == gpu.fabric.clique_id
        for gpu in devices
    )


fabric_specs = st.fixed_dictionaries(
    {},
    optional={
        "clusterUUID": st.sampled_from(["7c9a3e1f-0d2b-4c5e-8f6a-1b2c3d4e5f60", str(uuid.UUID(int=0)), "x"])
        | st.text(max_size=6),
        "cliqueID": st.integers(-(2**33), 2**33) | st.text(max_size=3),
        "state": st.sampled_from(["notSupported", "notStarted", "inProgress", "completed", "done"]),
        "status": st.integers(-3, 1000) | st.none(),
        "extra": st.integers(),
    },
)
node_specs = st.fixed_dictionaries(
    {},
    optional={
        "driverVersion": st.sampled_from(["570.170.01", "", "x.y"]) | st.integers(),
        "nodeName": st.text(max_size=6) | st.none(),
        "gpuCount": st.integers(-2, 9) | st.text(max_size=2),
        "gpuName": st.text(max_size=6),
        "initError": st.sampled_from(["DRIVER_NOT_LOADED", "LIBRARY_NOT_FOUND", "NOPE"]) | st.none(),
        "fabric": fabric_specs | st.none(),
        "gpus": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "uuid": st.text(max_size=6) | st.none(),
                    "name": st.text(max_size=6),
                    "fabric": fabric_specs | st.none(),
                },
            ),
            max_size=4,
        )
        | st.none(),
    },
)
node_files = st.one_of(
    node_specs.map(json.dumps),
    node_specs.map(lambda spec: yaml.safe_dump(spec, allow_unicode=True)),
    st.sampled_from(["gpuCount: 2001-02-30", "fabric: !!set {a}", "- 1", "[" * 40, "a: &a [*a, *a]"]),
    st.text(max_size=60),
)


@fuzz(ci=100, soak=6_000)
@given(text=node_files, strict=st.booleans())
@example(text="gpuCount: 2001-02-30", strict=True)
@example(text="[" * 600, strict=True)
@example(text='{"nodeName": "\\ud800\\udc00"}', strict=False)
@example(text='{"gpuCount": "\\ud800\\udc00"}', strict=False)
def test_fake_nvml_answers(text: str, strict: bool) -> None:
    """Any node file: the fake answers GPUs (whose clique ID is derivable) or raises a DriverError."""
    gates = resolve_feature_gates(f"CrashOnNVLinkFabricErrors={str(strict).lower()}")
    with tempfile.TemporaryDirectory(prefix="fuzz-nvml-") as root:
        path = Path(root, "node.yaml")
        path.write_text(text, encoding="utf-8")
        nvml = FakeNvml(path)
        try:
            answered = nvml.gpus()
            nvml.driver_version()
            asyncio.run(CliqueTracker(nvml, gates).discover())
        except DriverError:
            return
    assert all(gpu.uuid for gpu in answered)
