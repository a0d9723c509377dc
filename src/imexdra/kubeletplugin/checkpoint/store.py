"""The checkpoint on disk: atomic read-modify-write, claim state transitions, boot-ID validation.

``CheckpointStore`` owns ``<plugin data dir>/checkpoint.json``. Every change is a read-modify-write
under an in-process ``asyncio.Lock`` (upstream's checkpoint-manager mutex); cross-process exclusion
is the caller's ``pu.lock`` (``imexdra.common.files.flock``). Writes are atomic with mode 0600 and a
dot-prefixed temporary file, as the kubelet's checkpoint manager does.

Durability: writes are not fsynced by default (``durable=False``), unlike the kubelet's manager. The
records only matter within one boot — a different boot ID voids them all (docs/data-path.md §12) —
and within a boot the page cache already outlives a crashed or killed process. Only a power loss could
leave a torn file, and that file predates the next boot: ``initialize`` sets such a file aside and
starts empty, exactly what the boot-ID check would have done with a readable one. This keeps two
fsyncs off every prepare (kubelet-plugin bench: tens of milliseconds on a busy disk).

A checkpoint of the current boot that fails to parse or verify is never overwritten here: ``read()``
copies it aside to ``checkpoint.json.corrupt-<fnv32>`` (once per distinct content) and raises
``CorruptCheckpointError`` naming both files, so startup fails loudly and an operator can inspect it.

Reads are cached: the file is only re-parsed when its inode, size or mtime changed (every write
replaces the inode), so a prepare's read-modify-write cycles cost one parse at most.

The transition helpers implement the claim lifecycle of docs/data-path.md §7, §11 and §12:
PrepareStarted → PrepareCompleted (or → PrepareAborted on unprepare), expired aborted entries pruned.
"""

from __future__ import annotations

import asyncio
import datetime
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TypeVar

import structlog

from imexdra.common.errors import RetryableError
from imexdra.common.files.atomicfile import write_atomic
from imexdra.dra import gojson
from imexdra.dra.gojson import JsonValue
from imexdra.kubeletplugin.checkpoint.model import (
    Checkpoint,
    ClaimState,
    CorruptCheckpointError,
    PreparedClaim,
    PreparedDeviceGroup,
    marshal,
    unmarshal,
)

CHECKPOINT_FILE = "checkpoint.json"
CHECKPOINT_MODE = 0o600
BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")
PROC_STAT = Path("/proc/stat")
PREPARE_ABORTED_TTL = datetime.timedelta(seconds=90)  # 2 x the 45 s prepare budget

_log = structlog.get_logger(__name__)
_T = TypeVar("_T")


class CheckpointNotFoundError(RetryableError):
    """No checkpoint file exists yet (``initialize()`` has not run)."""


class CheckpointStore:
    """The plugin's checkpoint file; all methods are safe to call concurrently from one loop."""

    def __init__(self, directory: Path, *, filename: str = CHECKPOINT_FILE, durable: bool = False) -> None:
        self.path = directory / filename
        self._durable = durable
        self._lock = asyncio.Lock()
        self._cached: tuple[tuple[int, int, int], Checkpoint] | None = None

    async def read(self) -> Checkpoint:
        """Load and verify the checkpoint.

        Raises:
            CheckpointNotFoundError: the file does not exist.
            CorruptCheckpointError: it does not parse or verify; a copy has been kept aside.

        """
        async with self._lock:
            return await self._read()

    async def write(self, checkpoint: Checkpoint) -> None:
        """Replace the checkpoint atomically."""
        async with self._lock:
            await self._write(checkpoint)

    async def update(self, mutate: Callable[[Checkpoint], _T]) -> _T:
        """Read, apply ``mutate`` (which edits the checkpoint in place), write; return its result."""
        async with self._lock:
            checkpoint = await self._read()
            result = mutate(checkpoint)
            await self._write(checkpoint)
            return result

    async def initialize(self, boot_id: str, *, booted_at: float | None = None) -> Checkpoint:
        """Startup validation: keep records from this boot, drop those of an earlier one.

        A missing file becomes an empty checkpoint carrying ``boot_id``; an empty stored boot ID is
        filled in; a different one means the node rebooted, so every prepared-claim record is void. An
        unreadable file last written before this boot (``booted_at``, default from ``/proc/stat``)
        is void for the same reason and is set aside.

        Raises:
            CorruptCheckpointError: a file of this boot does not verify (nothing is overwritten).

        """
        async with self._lock:
            try:
                checkpoint = await self._read()
            except CheckpointNotFoundError:
                _log.info("Create empty checkpoint", path=str(self.path))
                checkpoint = Checkpoint(node_boot_id=boot_id)
            except CorruptCheckpointError as error:
                booted = booted_at if booted_at is not None else boot_time()
                if self.path.stat().st_mtime >= booted:
                    raise
                _log.warning("Invalidating unreadable checkpoint from an earlier boot", error=str(error))
                checkpoint = Checkpoint(node_boot_id=boot_id)
            else:
                if checkpoint.node_boot_id == boot_id:
                    return checkpoint
                if checkpoint.node_boot_id:
                    _log.warning(
                        "Invalidating checkpoint: node boot ID changed",
                        stored=checkpoint.node_boot_id,
                        current=boot_id,
                        dropped_claims=len(checkpoint.claims),
                    )
                    checkpoint = Checkpoint(node_boot_id=boot_id)
                else:
                    checkpoint.node_boot_id = boot_id
            await self._write(checkpoint)
            return checkpoint

    async def _read(self) -> Checkpoint:
        try:
            key = _file_key(self.path)
            if self._cached is not None and self._cached[0] == key:
                return _copy(self._cached[1])
            data = await asyncio.to_thread(self.path.read_bytes)
        except FileNotFoundError as error:
            raise CheckpointNotFoundError(f"checkpoint is not found: {self.path}") from error
        try:
            checkpoint = unmarshal(data)
        except CorruptCheckpointError as error:
            kept = await asyncio.to_thread(self._keep_aside, data)
            raise CorruptCheckpointError(f"{self.path}: {error} (copy kept at {kept})") from error
        self._cached = (key, _copy(checkpoint))
        return checkpoint

    async def _write(self, checkpoint: Checkpoint) -> None:
        data = marshal(checkpoint)
        self._cached = None
        if self._durable:
            await asyncio.to_thread(write_atomic, self.path, data, mode=CHECKPOINT_MODE)
        else:
            # A few KB into the page cache: quicker than the hop to a worker thread would be.
            write_atomic(self.path, data, mode=CHECKPOINT_MODE, durable=False)
        self._cached = (_file_key(self.path), _copy(checkpoint))

    def _keep_aside(self, data: bytes) -> Path:
        kept = self.path.with_name(f"{self.path.name}.corrupt-{gojson.checksum(data):08x}")
        if not kept.exists():
            write_atomic(kept, data, mode=CHECKPOINT_MODE)
        return kept


def _file_key(path: Path) -> tuple[int, int, int]:
    info = path.stat()
    return (info.st_ino, info.st_size, info.st_mtime_ns)


def _copy(checkpoint: Checkpoint) -> Checkpoint:
    # Entries are frozen; mutations replace them in the dict, so a copy of the dict suffices.
    return Checkpoint(claims=dict(checkpoint.claims), node_boot_id=checkpoint.node_boot_id)


def boot_time(proc_stat: Path = PROC_STAT) -> float:
    """When this boot started, in seconds since the epoch (``btime`` of ``/proc/stat``)."""
    for line in proc_stat.read_text(encoding="ascii").splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    raise OSError(f"no btime in {proc_stat}")


def read_boot_id(path: Path = BOOT_ID_PATH) -> str:
    """The kernel's boot ID, whitespace-trimmed."""
    return path.read_text(encoding="ascii").strip()


# --- claim lifecycle -----------------------------------------------------------------------------


def mark_prepare_started(
    checkpoint: Checkpoint, uid: str, *, status: dict[str, JsonValue], name: str, namespace: str
) -> None:
    """Record that preparing ``uid`` began (before any side effect); ``status`` is canonical."""
    checkpoint.claims[uid] = PreparedClaim(
        state=ClaimState.PREPARE_STARTED,
        status=status,
        name=name,
        namespace=namespace,
    )


def mark_prepare_completed(
    checkpoint: Checkpoint,
    uid: str,
    *,
    status: dict[str, JsonValue],
    name: str,
    namespace: str,
    prepared_devices: tuple[PreparedDeviceGroup, ...],
) -> None:
    """Record that ``uid`` is fully prepared with ``prepared_devices``; ``status`` is canonical."""
    checkpoint.claims[uid] = PreparedClaim(
        state=ClaimState.PREPARE_COMPLETED,
        status=status,
        prepared_devices=prepared_devices,
        name=name,
        namespace=namespace,
    )


def mark_prepare_aborted(
    checkpoint: Checkpoint, uid: str, *, name: str, namespace: str, now: datetime.datetime
) -> None:
    """Turn a PrepareStarted entry into a PrepareAborted tombstone (devices dropped, time stamped).

    Raises:
        KeyError: there is no entry for ``uid``.

    """
    entry = checkpoint.claims[uid]
    checkpoint.claims[uid] = replace(
        entry,
        state=ClaimState.PREPARE_ABORTED,
        prepared_devices=(),
        name=name,
        namespace=namespace,
        aborted_at=now,
    )


def delete_claim(checkpoint: Checkpoint, uid: str) -> bool:
    """Remove ``uid``'s entry; return whether there was one."""
    return checkpoint.claims.pop(uid, None) is not None


def delete_expired_aborted(
    checkpoint: Checkpoint, *, now: datetime.datetime, ttl: datetime.timedelta = PREPARE_ABORTED_TTL
) -> int:
    """Drop PrepareAborted entries older than ``ttl`` (or without a time); return how many."""
    expired = [
        uid
        for uid, claim in checkpoint.claims.items()
        if claim.state == ClaimState.PREPARE_ABORTED
        and (claim.aborted_at is None or now - claim.aborted_at > ttl)
    ]
    for uid in expired:
        del checkpoint.claims[uid]
    return len(expired)


def same_status(claim: PreparedClaim, status: dict[str, JsonValue]) -> bool:
    """Whether ``status`` (canonical, ``dra.claimstatus``) equals the stored one semantically.

    Both sides go through JSON once so that a number read from the file (kept in its source
    spelling, e.g. ``1.50``) compares equal to the same number from the API (``1.5``).
    """
    stored = json.loads(gojson.encode(claim.status))
    incoming = json.loads(gojson.encode(status))
    return bool(stored == incoming)
