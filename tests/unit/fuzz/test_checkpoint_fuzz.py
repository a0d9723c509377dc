"""Fuzzing checkpoint files: truncated, bit-flipped, spliced and foreign-layout files.

``unmarshal`` must give a ``Checkpoint`` or a ``CorruptCheckpointError`` for any bytes; a file cut
short anywhere is always corrupt. Foreign layouts are built with *valid* checksums, so they get past
verification into the layout code (what a newer or unrelated writer would produce). Through the
store, an unreadable file is never lost: ``read`` and ``initialize`` leave its bytes in place, and a
copy kept aside holds them byte for byte even when a file from an earlier boot is replaced.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from imexdra.dra import gojson
from imexdra.kubeletplugin.checkpoint.model import Checkpoint, CorruptCheckpointError, marshal, unmarshal
from imexdra.kubeletplugin.checkpoint.store import CheckpointStore
from tests.unit.api.opaque_inputs import json_values
from tests.unit.fuzz.profiles import fuzz
from tests.unit.kubeletplugin.checkpoint_samples import BOOT_ID, EMPTY_FILE, UID, V1_86, claim_86

FULL_FILE = marshal(Checkpoint(claims={UID: claim_86()}, node_boot_id=BOOT_ID))


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def with_checksums(v1: Any, v2: Any | None) -> bytes:
    """A file whose top-level and v2 checksums verify against its own bytes, whatever the layout."""
    v1_text = _compact(v1)
    top = gojson.checksum(f'{{"checksum":0,"v1":{v1_text}}}'.encode())
    if v2 is None:
        return f'{{"checksum":{top},"v1":{v1_text}}}'.encode()
    body = _compact(v2)[1:] if isinstance(v2, dict) and v2 else "}"
    unsummed = '{"checksum":0' + ("," + body if body != "}" else "}")
    v2_text = '{"checksum":' + str(gojson.checksum(unsummed.encode())) + unsummed[len('{"checksum":0') :]
    return f'{{"checksum":{top},"v1":{v1_text},"v2":{v2_text}}}'.encode()


V1_ONLY_FILE = with_checksums(json.loads(V1_86), None)
FILES = {"empty": EMPTY_FILE, "full": FULL_FILE, "v1-only": V1_ONLY_FILE}


@st.composite
def damaged_files(draw: st.DrawFn) -> bytes:
    """A valid file with one random cut, flipped bit, insertion, deletion or splice."""
    data = FILES[draw(st.sampled_from(sorted(FILES)))]
    position = draw(st.integers(0, len(data) - 1))
    damage = draw(st.sampled_from(["flip", "insert", "delete", "splice"]))
    if damage == "flip":
        return (
            data[:position] + bytes([data[position] ^ (1 << draw(st.integers(0, 7)))]) + data[position + 1 :]
        )
    if damage == "insert":
        return data[:position] + draw(st.binary(min_size=1, max_size=4)) + data[position:]
    if damage == "delete":
        return data[:position] + data[position + draw(st.integers(1, 8)) :]
    other = FILES[draw(st.sampled_from(sorted(FILES)))]
    return data[:position] + other[draw(st.integers(0, len(other) - 1)) :]


CLAIM_KEYS = ["checkpointState", "status", "preparedDevices", "name", "namespace", "abortedAt"]
DEVICE_KEYS = ["devices", "configState", "channel", "daemon", "info", "device", "id", "Type", "ComputeDomain"]
layout_values = st.recursive(
    json_values,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(CLAIM_KEYS + DEVICE_KEYS + ["preparedClaims"]), inner, max_size=4)
    ),
    max_leaves=10,
)
foreign_sections = st.one_of(
    layout_values,
    st.fixed_dictionaries(
        {"preparedClaims": st.dictionaries(st.text(max_size=4), layout_values, max_size=3)}
    ),
    st.fixed_dictionaries(
        {
            "preparedClaims": st.fixed_dictionaries(
                {UID: st.fixed_dictionaries({}, optional={key: layout_values for key in CLAIM_KEYS})}
            )
        },
        optional={"nodeBootID": json_values},
    ),
)


@fuzz(ci=50, soak=8_000)
@given(data=st.sampled_from(sorted(FILES)), cut=st.integers(0, 10**6))
def test_truncated_files_are_always_corrupt(data: str, cut: int) -> None:
    """A file cut short anywhere is a CorruptCheckpointError, never a (partial) checkpoint."""
    whole = FILES[data]
    try:
        unmarshal(whole[: cut % len(whole)])
    except CorruptCheckpointError:
        return
    raise AssertionError("a truncated checkpoint was accepted")


@fuzz(ci=100, soak=10_000)
@given(data=damaged_files())
def test_damaged_files(data: bytes) -> None:
    """Flipped bits, insertions, deletions and splices: a checkpoint or CorruptCheckpointError."""
    with contextlib.suppress(CorruptCheckpointError):
        unmarshal(data)


@fuzz(ci=100, soak=8_000)
@given(v1=st.just(json.loads(V1_86)) | foreign_sections, v2=st.none() | foreign_sections)
@example(v1={}, v2={"preparedClaims": []})
@example(v1=[[[[[]]]]], v2=None)
def test_foreign_layouts_with_valid_checksums(v1: Any, v2: Any) -> None:
    """Layouts we do not write, checksums right: a checkpoint or CorruptCheckpointError."""
    with contextlib.suppress(CorruptCheckpointError):
        unmarshal(with_checksums(v1, v2))


def test_with_checksums_builds_verifiable_files() -> None:
    """The foreign-layout builder's checksums verify (else the foreign-layout test is moot)."""
    checkpoint = unmarshal(with_checksums(json.loads(V1_86), {"preparedClaims": {}, "nodeBootID": BOOT_ID}))
    assert checkpoint == Checkpoint(node_boot_id=BOOT_ID)
    assert unmarshal(with_checksums(json.loads(V1_86), None)).claims[UID].prepared_devices


@fuzz(ci=40, soak=4_000)
@given(
    data=damaged_files() | st.sampled_from([b"", b"[" * 100_000, b"\xff\xfe", b"null"]),
    earlier_boot=st.booleans(),
)
@example(data=b"[" * 100_000, earlier_boot=False)
def test_unreadable_files_are_never_lost(data: bytes, earlier_boot: bool) -> None:
    """An unreadable checkpoint stays on disk (this boot) or is kept aside byte for byte (earlier boot)."""
    try:
        unmarshal(data)
    except CorruptCheckpointError:
        pass
    else:
        return  # readable: nothing to protect

    async def scenario(directory: Path) -> None:
        store = CheckpointStore(directory)
        store.path.write_bytes(data)
        try:
            await store.read()
        except CorruptCheckpointError:
            pass
        else:
            raise AssertionError("the store accepted a file unmarshal rejects")
        assert store.path.read_bytes() == data
        booted_at = store.path.stat().st_mtime + (1.0 if earlier_boot else -1.0)
        try:
            await store.initialize(BOOT_ID, booted_at=booted_at)
        except CorruptCheckpointError:
            assert not earlier_boot
            assert store.path.read_bytes() == data
        else:
            assert earlier_boot
            assert (await store.read()) == Checkpoint(node_boot_id=BOOT_ID)
        kept = [path.read_bytes() for path in directory.glob("checkpoint.json.corrupt-*")]
        assert kept == [data]

    with tempfile.TemporaryDirectory(prefix="fuzz-checkpoint-") as directory:
        asyncio.run(scenario(Path(directory)))
