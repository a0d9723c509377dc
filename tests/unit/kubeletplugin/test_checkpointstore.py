"""The checkpoint file: boot-ID initialisation, atomic updates, corrupt files kept, claim lifecycle."""

import asyncio
import datetime
import stat
from pathlib import Path

import pytest

from imexdra.api.constants import DeviceType
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
)
from imexdra.kubeletplugin.checkpoint.store import (
    PREPARE_ABORTED_TTL,
    CheckpointNotFoundError,
    CheckpointStore,
    boot_time,
    delete_claim,
    delete_expired_aborted,
    mark_prepare_aborted,
    mark_prepare_completed,
    mark_prepare_started,
    read_boot_id,
    same_status,
)

BOOT = "3f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"
NOW = datetime.datetime(2026, 3, 4, 5, 6, 7, tzinfo=datetime.UTC)
STATUS = {"reservedFor": [{"uid": "p1", "name": "pod", "resource": "pods"}], "allocation": {"devices": {}}}
CANONICAL = canonical_claim_status(STATUS)  # as claims enter the plugin (resourceclaim)
GROUP = PreparedDeviceGroup(
    devices=(
        PreparedDevice(DeviceType.CHANNEL, 0, CheckpointedDevice(("channel",), "node-a", "channel-0", ())),
    ),
    config_state=ConfigState("channel", "cd-uid"),
)


def completed(boot: str = BOOT) -> Checkpoint:
    cp = Checkpoint(node_boot_id=boot)
    mark_prepare_completed(cp, "u1", status=CANONICAL, name="c", namespace="ns", prepared_devices=(GROUP,))
    return cp


async def test_initialize_creates_empty_checkpoint(tmp_path: Path) -> None:
    """Without a file, initialize writes the reference empty checkpoint with mode 0600."""
    store = CheckpointStore(tmp_path)
    cp = await store.initialize(BOOT)
    assert cp == Checkpoint(node_boot_id=BOOT)
    assert store.path.read_bytes() == marshal(Checkpoint(node_boot_id=BOOT))
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    assert store.path.name == "checkpoint.json"


@pytest.mark.parametrize(
    ("stored_boot", "keeps_claims", "stored_after"),
    [(BOOT, True, BOOT), ("", True, BOOT), ("an-earlier-boot", False, BOOT)],
    ids=["same-boot-kept", "empty-boot-filled-in", "reboot-wipes"],
)
async def test_initialize_boot_id(
    tmp_path: Path, stored_boot: str, keeps_claims: bool, stored_after: str
) -> None:
    """Same boot keeps records, an empty boot ID is upgraded in place, another boot discards them."""
    store = CheckpointStore(tmp_path)
    await store.write(completed(stored_boot))
    cp = await store.initialize(BOOT)
    assert ("u1" in cp.claims) is keeps_claims
    on_disk = await store.read()
    assert on_disk == cp
    assert on_disk.node_boot_id == stored_after


async def test_read_missing_is_not_found(tmp_path: Path) -> None:
    """Reading before initialize is a CheckpointNotFoundError."""
    with pytest.raises(CheckpointNotFoundError, match="checkpoint is not found"):
        await CheckpointStore(tmp_path).read()


async def test_corrupt_file_kept_and_never_overwritten(tmp_path: Path) -> None:
    """A corrupt checkpoint fails read and initialize, stays in place, and a copy is kept aside once."""
    store = CheckpointStore(tmp_path)
    garbage = marshal(completed()).replace(b'"name":"c"', b'"name":"d"')
    store.path.write_bytes(garbage)
    with pytest.raises(CorruptCheckpointError, match=r"copy kept at .*checkpoint\.json\.corrupt-") as caught:
        await store.read()
    with pytest.raises(CorruptCheckpointError):
        await store.initialize(BOOT)
    assert store.path.read_bytes() == garbage
    kept = [p for p in tmp_path.iterdir() if p.name.startswith("checkpoint.json.corrupt-")]
    assert len(kept) == 1
    assert kept[0].read_bytes() == garbage
    assert str(kept[0]) in str(caught.value)


async def test_unreadable_checkpoint_from_an_earlier_boot_is_set_aside(tmp_path: Path) -> None:
    """A torn file written before this boot is void anyway: kept aside, replaced by an empty one."""
    store = CheckpointStore(tmp_path)
    store.path.write_bytes(b'{"checksum":1,"v2":{"pre')
    written = store.path.stat().st_mtime
    cp = await store.initialize(BOOT, booted_at=written + 1)
    assert cp == Checkpoint(node_boot_id=BOOT)
    assert (await CheckpointStore(tmp_path).read()).node_boot_id == BOOT
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("checkpoint.json.corrupt-")]


def test_boot_time_from_proc_stat(tmp_path: Path) -> None:
    """btime is read from /proc/stat; the real one lies in the past."""
    proc_stat = tmp_path / "stat"
    proc_stat.write_text("cpu  1 2 3\nbtime 1767225600\nprocesses 7\n")
    assert boot_time(proc_stat) == 1767225600.0
    assert 0 < boot_time() < datetime.datetime.now().timestamp()


async def test_cached_reads_notice_other_writers(tmp_path: Path) -> None:
    """Reads come from a cache that a write by another store (process) invalidates."""
    mine, theirs = CheckpointStore(tmp_path), CheckpointStore(tmp_path)
    await mine.initialize(BOOT)
    first = await mine.read()
    first.claims["scratch"] = completed().claims["u1"]  # a caller's edit must not leak into the cache
    assert (await mine.read()).claims == {}
    await theirs.write(completed())
    assert set((await mine.read()).claims) == {"u1"}


async def test_concurrent_updates_all_apply(tmp_path: Path) -> None:
    """Concurrent read-modify-write updates serialise; none is lost."""
    store = CheckpointStore(tmp_path)
    await store.initialize(BOOT)

    async def add(uid: str) -> None:
        await store.update(lambda cp: mark_prepare_started(cp, uid, status={}, name=uid, namespace="ns"))

    await asyncio.gather(*(add(f"u{i}") for i in range(20)))
    assert sorted((await store.read()).claims) == sorted(f"u{i}" for i in range(20))


async def test_update_returns_mutator_result(tmp_path: Path) -> None:
    """update() hands back what the mutation returned and persists the change."""
    store = CheckpointStore(tmp_path)
    await store.write(completed())
    assert await store.update(lambda cp: delete_claim(cp, "u1")) is True
    assert (await store.read()).claims == {}


def test_started_then_completed() -> None:
    """PrepareStarted carries the canonical status and name; PrepareCompleted adds the devices."""
    cp = Checkpoint()
    mark_prepare_started(cp, "u1", status=CANONICAL, name="c", namespace="ns")
    started = cp.claims["u1"]
    assert (started.state, started.name, started.namespace, started.prepared_devices) == (
        ClaimState.PREPARE_STARTED,
        "c",
        "ns",
        (),
    )
    assert list(started.status) == ["allocation", "reservedFor"]
    mark_prepare_completed(cp, "u1", status=CANONICAL, name="c", namespace="ns", prepared_devices=(GROUP,))
    assert cp.claims["u1"].state == ClaimState.PREPARE_COMPLETED
    assert cp.claims["u1"].all_devices() == list(GROUP.devices)


def test_started_then_aborted() -> None:
    """Unprepare of a started claim leaves a PrepareAborted tombstone with a time and no devices."""
    cp = completed()
    mark_prepare_aborted(cp, "u1", name="c2", namespace="ns2", now=NOW)
    entry = cp.claims["u1"]
    assert (entry.state, entry.name, entry.namespace, entry.aborted_at, entry.prepared_devices) == (
        ClaimState.PREPARE_ABORTED,
        "c2",
        "ns2",
        NOW,
        (),
    )
    assert same_status(entry, CANONICAL)


def test_delete_expired_aborted() -> None:
    """Aborted entries older than the 90 s TTL (or undated) go; fresh aborted and completed stay."""
    cp = completed()
    cp.claims["old"] = PreparedClaim(
        state=ClaimState.PREPARE_ABORTED, aborted_at=NOW - PREPARE_ABORTED_TTL - datetime.timedelta(seconds=1)
    )
    cp.claims["fresh"] = PreparedClaim(
        state=ClaimState.PREPARE_ABORTED, aborted_at=NOW - PREPARE_ABORTED_TTL / 2
    )
    cp.claims["undated"] = PreparedClaim(state=ClaimState.PREPARE_ABORTED)
    assert delete_expired_aborted(cp, now=NOW) == 2
    assert sorted(cp.claims) == ["fresh", "u1"]


@pytest.mark.parametrize(
    ("incoming", "expected"),
    [
        (
            {
                "allocation": {"devices": {}},
                "reservedFor": [{"resource": "pods", "name": "pod", "uid": "p1"}],
            },
            True,
        ),
        ({"reservedFor": [{"uid": "p2", "name": "pod", "resource": "pods"}]}, False),
        ({"allocation": {}}, False),
    ],
    ids=["same-reordered", "reserved-for-changed", "reservation-dropped"],
)
def test_same_status(incoming: dict[str, object], expected: bool) -> None:
    """Status equality is semantic: key order does not matter, a changed reservedFor does."""
    assert same_status(completed().claims["u1"], canonical_claim_status(incoming)) is expected


def test_read_boot_id_trims(tmp_path: Path) -> None:
    """The boot ID is read whitespace-trimmed."""
    path = tmp_path / "boot_id"
    path.write_text(BOOT + "\n")
    assert read_boot_id(path) == BOOT
