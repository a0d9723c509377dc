"""Checkpoint V2 bytes and checksums (docs/compatibility.md §2.5), V1/legacy reading, corruption detection."""

import contextlib
import datetime
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from imexdra.api.constants import DeviceType
from imexdra.dra import gojson
from imexdra.dra.claimstatus import canonical_claim_status
from imexdra.kubeletplugin.checkpoint.model import (
    Checkpoint,
    CheckpointedDevice,
    ClaimState,
    ConfigState,
    CorruptCheckpointError,
    PreparedClaim,
    PreparedDevice,
    PreparedDeviceGroup,
    marshal,
    unmarshal,
)
from tests.unit.kubeletplugin.checkpoint_samples import (
    BOOT_ID,
    CD_UID,
    EMPTY_FILE,
    UID,
    V1_86,
    channel_group,
    claim_86,
)


def test_empty_checkpoint_is_byte_exact() -> None:
    """A fresh checkpoint with the reference boot ID is byte-for-byte the reference file."""
    assert marshal(Checkpoint(node_boot_id=BOOT_ID)) == EMPTY_FILE
    assert unmarshal(EMPTY_FILE) == Checkpoint(node_boot_id=BOOT_ID)


def test_illustrative_file_v1_and_top_checksum() -> None:
    """The illustrative claim yields exactly that v1 section and its top-level checksum 1063727406."""
    data = marshal(Checkpoint(claims={UID: claim_86()}, node_boot_id=BOOT_ID))
    members = gojson.object_members(data.decode())
    start, end = members["v1"]
    assert data.decode()[start:end] == V1_86
    assert json.loads(data)["checksum"] == 1063727406


def test_v2_checksum_covers_v2_with_zero_checksum() -> None:
    """v2's checksum is over v2's own bytes with "checksum":0 (and the top one excludes v2)."""
    data = marshal(Checkpoint(claims={UID: claim_86()}, node_boot_id=BOOT_ID)).decode()
    start, end = gojson.object_members(data)["v2"]
    v2_text = data[start:end]
    stored = json.loads(v2_text)["checksum"]
    assert gojson.checksum(v2_text.replace(f'"checksum":{stored}', '"checksum":0', 1).encode()) == stored


def test_v1_holds_only_completed_claims() -> None:
    """Started and aborted entries live only in v2; v1 is the downgrade view of completed claims."""
    aborted_at = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    cp = Checkpoint(
        claims={
            "a": PreparedClaim(state=ClaimState.PREPARE_STARTED, name="n", namespace="ns"),
            "b": PreparedClaim(state=ClaimState.PREPARE_ABORTED, aborted_at=aborted_at),
            "c": PreparedClaim(state=ClaimState.PREPARE_COMPLETED, prepared_devices=(channel_group("c"),)),
        }
    )
    top = json.loads(marshal(cp))
    assert list(top["v1"]["preparedClaims"]) == ["c"]
    assert top["v2"]["preparedClaims"]["a"] == {
        "checkpointState": "PrepareStarted",
        "status": {},
        "name": "n",
        "namespace": "ns",
    }
    assert top["v2"]["preparedClaims"]["b"] == {
        "checkpointState": "PrepareAborted",
        "status": {},
        "abortedAt": "2026-01-02T03:04:05Z",
    }


@pytest.mark.parametrize(
    ("cdi_ids", "fragment"),
    [
        ((), b'"CDIDeviceIDs":[]}'),
        (None, b'"CDIDeviceIDs":null}'),
    ],
    ids=["empty-list", "nil"],
)
def test_device_record_go_quirks(cdi_ids: tuple[str, ...] | None, fragment: bytes) -> None:
    """The unused device kind is null, [] and null CDI lists differ, ShareID/Metadata are omitted."""
    group = (
        channel_group(cdi_ids=cdi_ids)
        if cdi_ids is not None
        else PreparedDeviceGroup(
            devices=(
                PreparedDevice(
                    DeviceType.CHANNEL, 0, CheckpointedDevice(("channel",), "p", "channel-0", None)
                ),
            ),
            config_state=ConfigState("channel", CD_UID),
        )
    )
    data = marshal(
        Checkpoint(claims={UID: PreparedClaim(state=ClaimState.PREPARE_COMPLETED, prepared_devices=(group,))})
    )
    assert fragment + b"}," + b'"daemon":null}' in data
    assert b"ShareID" not in data and b"Metadata" not in data


@pytest.mark.parametrize(
    "claim",
    [
        PreparedClaim(
            state=ClaimState.PREPARE_STARTED, status={"allocation": {"devices": {}}}, name="x", namespace="y"
        ),
        PreparedClaim(
            state=ClaimState.PREPARE_ABORTED,
            aborted_at=datetime.datetime(2026, 5, 6, 7, 8, 9, tzinfo=datetime.UTC),
        ),
        PreparedClaim(state="UnprepareCompleted"),
        PreparedClaim(
            state=ClaimState.PREPARE_COMPLETED,
            prepared_devices=(
                PreparedDeviceGroup(
                    devices=(
                        PreparedDevice(
                            DeviceType.DAEMON,
                            0,
                            CheckpointedDevice(
                                ("daemon",), "p", "daemon-0", ("a", "b"), share_id="s", metadata={"k": 1}
                            ),
                        ),
                    ),
                    config_state=ConfigState("daemon", CD_UID),
                ),
            ),
        ),
    ],
    ids=["started", "aborted", "unknown-state-kept", "daemon-with-optional-fields"],
)
def test_round_trip(claim: PreparedClaim) -> None:
    """Every claim shape survives marshal → unmarshal unchanged."""
    cp = Checkpoint(claims={UID: claim}, node_boot_id=BOOT_ID)
    assert unmarshal(marshal(cp)) == cp


@given(
    st.dictionaries(
        st.text(min_size=1, max_size=8),
        st.builds(
            PreparedClaim,
            state=st.sampled_from(list(ClaimState)),
            name=st.text(max_size=10),
            namespace=st.text(max_size=10),
            status=st.builds(
                lambda n: canonical_claim_status(
                    {"reservedFor": [{"resource": "pods", "name": n, "uid": n}]} if n else None
                ),
                st.text(max_size=5),
            ),
        ),
        max_size=4,
    ),
    st.text(max_size=12),
)
def test_round_trip_property(claims: dict[str, PreparedClaim], boot_id: str) -> None:
    """Arbitrary UIDs, names (incl. HTML and control characters) and states round-trip."""
    cp = Checkpoint(claims=claims, node_boot_id=boot_id)
    assert unmarshal(marshal(cp)) == cp


def test_verifies_fields_we_do_not_model_against_file_bytes() -> None:
    """A file from a newer writer (status fields unknown to us) verifies against its own bytes."""
    status = '{"allocation":{"devices":{},"futureField":{"x":1.50}}}'
    v1 = '{"preparedClaims":{"u":{"status":' + status + "}}}"
    v2_body = '"preparedClaims":{"u":{"checkpointState":"PrepareCompleted","status":' + status + "}}"
    top = gojson.checksum(('{"checksum":0,"v1":' + v1 + "}").encode())
    v2_sum = gojson.checksum(('{"checksum":0,' + v2_body + "}").encode())
    data = f'{{"checksum":{top},"v1":{v1},"v2":{{"checksum":{v2_sum},{v2_body}}}}}'.encode()
    claim = unmarshal(data).claims["u"]
    assert claim.state == ClaimState.PREPARE_COMPLETED
    assert claim.status == {"allocation": {"devices": {}}}


def test_v1_only_file_becomes_completed_claims() -> None:
    """A checkpoint with only v1 (an older writer) reads as PrepareCompleted claims without names."""
    top = gojson.checksum(('{"checksum":0,"v1":' + V1_86 + "}").encode())
    cp = unmarshal(f'{{"checksum":{top},"v1":{V1_86}}}'.encode())
    assert cp.claims[UID].state == ClaimState.PREPARE_COMPLETED
    assert cp.claims[UID].name == ""
    assert cp.claims[UID].prepared_devices == (channel_group(),)


def test_legacy_2503rc2_file() -> None:
    """The 25.3.0-rc2 layout (group lists, proto field names) becomes completed claims without status."""
    v1 = (
        '{"preparedClaims":{"u":[{"devices":[{"channel":{"info":{"id":0},"device":{"request_names":["channel"],'
        '"pool_name":"node-a","device_name":"channel-0","cdi_device_ids":["k8s.compute-domain.nvidia.com/claim=u-channel-0"]}},'
        '"daemon":null}],"configState":{"Type":"channel","ComputeDomain":"cd"}}]}}'
    )
    top = gojson.checksum(('{"checksum":0,"v1":' + v1 + "}").encode())
    claim = unmarshal(f'{{"checksum":{top},"v1":{v1}}}'.encode()).claims["u"]
    assert claim.state == ClaimState.PREPARE_COMPLETED
    assert claim.status == {}
    (device,) = claim.all_devices()
    assert device.device == CheckpointedDevice(
        ("channel",), "node-a", "channel-0", ("k8s.compute-domain.nvidia.com/claim=u-channel-0",)
    )


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (EMPTY_FILE.replace(b"1083090442", b"1083090443"), "top-level checksum 1083090443 does not match"),
        (EMPTY_FILE.replace(b"719341321", b"719341322"), "v2 checksum"),
        (EMPTY_FILE.replace(b"3f1e2d3c", b"3f1e2d3d"), "v2 checksum"),
        (b'{"checksum":"x","v1":{}}', "top-level checksum is missing"),
        (b"{not json", "not valid JSON"),
        (b"[]", "not valid JSON|not a JSON object"),
        (b"\xff\xfe", "not valid JSON"),
        (
            b'{"checksum":1,"v2":{"checksum":1,"preparedClaims":{"u":{"preparedDevices":[{"devices":[{"channel":null,"daemon":null}],"configState":{}}]}}}}',
            "unexpected layout",
        ),
        (b'{"checksum":1,"v2":{"preparedClaims":{}}}', "no checksum"),
        (b'{"checksum":1,"v2":5}', "unexpected layout"),
        (b'{"checksum":1,"v1":[1]}', "unexpected layout"),
        (b'{"checksum":1,"v2":{"checksum":1,"preparedClaims":{"u":5}}}', "unexpected layout"),
        (b'{"checksum":1,"v2":{"checksum":1,"preparedClaims":[1]}}', "unexpected layout"),
    ],
    ids=[
        "top-checksum",
        "v2-checksum",
        "content-edited",
        "checksum-type",
        "not-json",
        "not-object",
        "not-utf8",
        "device-neither-kind",
        "v2-without-checksum",
        "v2-not-object",
        "v1-not-object",
        "claim-not-object",
        "claims-not-object",
    ],
)
def test_corruption_detected(data: bytes, message: str) -> None:
    """Tampering, garbage and impossible layouts raise CorruptCheckpointError with a clear reason."""
    with pytest.raises(CorruptCheckpointError, match=message):
        unmarshal(data)


_KEYS = [
    "checksum",
    "v1",
    "v2",
    "preparedClaims",
    "u",
    "status",
    "preparedDevices",
    "devices",
    "channel",
    "daemon",
]
_KEYS += ["info", "device", "id", "configState", "checkpointState", "abortedAt", "nodeBootID", "allocation"]
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(_KEYS), inner, max_size=4),
    max_leaves=12,
)


@given(st.one_of(st.binary(max_size=64), _JSON.map(lambda v: json.dumps(v).encode())))
def test_garbage_is_only_ever_corrupt(data: bytes) -> None:
    """Any input either parses or raises CorruptCheckpointError, never another exception."""
    with contextlib.suppress(CorruptCheckpointError):
        unmarshal(data)
