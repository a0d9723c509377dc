"""Leader election on a ``coordination.k8s.io/v1`` Lease, with client-go's timing and semantics.

A candidate polls the Lease every ``retry_period`` (jittered) until it is free or its holder stopped
renewing for ``lease_duration``, then takes it with an optimistic-concurrency update (create if absent);
the leader renews every ``retry_period`` and gives up when it cannot renew within ``renew_deadline``.
Expiry is judged on this process's monotonic clock from when it last *saw* the record change, never by
comparing the holder's timestamps with our wall clock, so clock skew between nodes cannot split the brain.

The leader renews with the Lease it last wrote (no GET): a 409 means someone else wrote the Lease we
believe we hold, and the only safe reading is that leadership is lost. After any other failure it
re-reads the Lease before trying again, until the renew deadline passes. On a clean exit the Lease is
released (holder cleared, duration 1 s) so a standby takes over at once, as upstream's
``ReleaseOnCancel`` does. Identity is upstream's ``<pod name>-<uuid4>`` (:func:`new_identity`).
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import msgspec
import structlog

from imexdra.common.errors import ConfigError, RetryableError
from imexdra.common.kube.api import KubeApi
from imexdra.common.kube.client import ApiStatusError, is_conflict, is_not_found, kube_errors, microtime
from imexdra.common.kube.models.coordination_v1 import Lease, LeaseSpec
from imexdra.common.kube.models.meta_v1 import ObjectMeta
from imexdra.common.observability.metrics import LEADER_STATUS

T = TypeVar("T")

_log = structlog.get_logger(__name__)


class LeadershipLostError(RetryableError):
    """The Lease could not be renewed in time or was taken over; the leader's work was cancelled."""


def new_identity(pod_name: str) -> str:
    """A fresh candidate identity, unique per process start (upstream: ``<POD_NAME>-<uuid4>``)."""
    return f"{pod_name}-{uuid.uuid4()}"


@dataclass(frozen=True, slots=True)
class LeaderElectionConfig:
    """Which Lease to contend for, as whom, and client-go's timings (seconds)."""

    name: str
    namespace: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not self.lease_duration > self.renew_deadline > self.retry_period > 0:
            raise ConfigError("leader election needs lease duration > renew deadline > retry period > 0")
        if self.lease_duration < 1:
            raise ConfigError("leader election lease duration must be at least 1 s")


class LeaderElector:
    """Contends for one Lease; :meth:`run` does the leader's work while the Lease is held.

    One elector serves one term: once it stopped leading, the process is expected to exit (upstream
    semantics), so ``started_leading`` and ``stopped_leading`` are set once and never cleared.
    """

    def __init__(
        self,
        client: KubeApi,
        config: LeaderElectionConfig,
        *,
        on_new_leader: Callable[[str], None] | None = None,
    ) -> None:
        self.config = config
        self.started_leading = asyncio.Event()
        self.stopped_leading = asyncio.Event()
        self._client = client
        self._on_new_leader = on_new_leader
        self._lease: Lease | None = None  # the last version of the Lease we read or wrote
        self._observed: LeaseSpec | None = None
        self._observed_at = 0.0
        self._leading = False
        self._log = _log.bind(lease=f"{config.namespace}/{config.name}", identity=config.identity)
        LEADER_STATUS.labels(name=config.name).set(0)

    @property
    def is_leader(self) -> bool:
        """True while this process holds the Lease."""
        return self._leading

    @property
    def leader(self) -> str | None:
        """The holder identity last observed on the Lease."""
        return self._observed.holderIdentity if self._observed else None

    async def run(self, work: Callable[[], Awaitable[T]]) -> T:
        """Wait for leadership, then run ``work`` while renewing; release the Lease when it ends.

        Returns what ``work`` returns (and re-raises what it raises). If leadership is lost first,
        ``work`` is cancelled and :class:`LeadershipLostError` is raised; like upstream, the caller
        should then exit so the next term starts from a clean process.
        """
        await self._acquire()
        work_task = asyncio.ensure_future(work())
        renew_task = asyncio.create_task(self._keep_renewing())
        try:
            await asyncio.wait({work_task, renew_task}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (work_task, renew_task):
                task.cancel()
            await asyncio.gather(work_task, renew_task, return_exceptions=True)
            if self._leading:
                await self._release()
        if not work_task.cancelled():
            return work_task.result()
        renew_task.result()  # raises LeadershipLostError
        raise LeadershipLostError("leader work was cancelled")

    async def _acquire(self) -> None:
        while True:
            if await self._try_acquire_or_renew():
                self._set_leading(True)
                return
            await asyncio.sleep(self.config.retry_period * (1.0 + random.random() * 1.2))  # noqa: S311

    async def _keep_renewing(self) -> None:
        loop = asyncio.get_running_loop()
        last_renewal = loop.time()
        while True:
            await asyncio.sleep(self.config.retry_period)
            remaining = last_renewal + self.config.renew_deadline - loop.time()
            try:
                async with asyncio.timeout(max(remaining, 0.0)):
                    renewed = await self._try_acquire_or_renew()
            except TimeoutError:
                renewed = False
            if renewed:
                last_renewal = loop.time()
            elif not self._leading or loop.time() >= last_renewal + self.config.renew_deadline:
                self._set_leading(False)
                raise LeadershipLostError(f"lost lease {self.config.namespace}/{self.config.name}")

    async def _try_acquire_or_renew(self) -> bool:
        """One attempt; False means "not now" (held by another, conflict, API trouble)."""
        try:
            if self._leading and self._lease is not None:
                return await self._renew_optimistically(self._lease)
            return await self._acquire_once()
        except ApiStatusError as error:
            self._log.info("failed to acquire lease", error=str(error))
            return False

    async def _renew_optimistically(self, lease: Lease) -> bool:
        spec = msgspec.structs.replace(lease.spec or LeaseSpec(), renewTime=microtime())
        try:
            await self._write(msgspec.structs.replace(lease, spec=spec), create=False)
        except ApiStatusError as error:
            if is_conflict(error):
                self._log.warning("failed to renew lease: taken over", error=str(error))
                self._set_leading(False)
            else:  # the write may have landed after all: re-read before the next attempt
                self._lease = None
            raise
        return True

    async def _acquire_once(self) -> bool:
        cfg = self.config
        loop = asyncio.get_running_loop()
        now = microtime()
        try:
            with kube_errors(f"get lease {cfg.namespace}/{cfg.name}"):
                lease = await self._client.get(Lease, cfg.name, namespace=cfg.namespace)
        except ApiStatusError as error:
            if not is_not_found(error):
                raise
            spec = LeaseSpec(
                holderIdentity=cfg.identity,
                leaseDurationSeconds=round(cfg.lease_duration),
                acquireTime=now,
                renewTime=now,
                leaseTransitions=0,
            )
            meta = ObjectMeta(name=cfg.name, namespace=cfg.namespace)
            await self._write(Lease(metadata=meta, spec=spec), create=True)
            return True
        seen = lease.spec or LeaseSpec()
        if seen != self._observed:
            self._observe(seen)
            self._observed_at = loop.time()
        holder = seen.holderIdentity
        duration = seen.leaseDurationSeconds or cfg.lease_duration
        if holder and holder != cfg.identity and loop.time() < self._observed_at + duration:
            return False
        if holder == cfg.identity:
            acquired, transitions = microtime(seen.acquireTime or now), seen.leaseTransitions or 0
        else:
            acquired, transitions = now, (seen.leaseTransitions or 0) + 1
        spec = LeaseSpec(
            holderIdentity=cfg.identity,
            leaseDurationSeconds=round(cfg.lease_duration),
            acquireTime=acquired,
            renewTime=now,
            leaseTransitions=transitions,
        )
        await self._write(msgspec.structs.replace(lease, spec=spec), create=False)
        return True

    async def _write(self, lease: Lease, *, create: bool) -> None:
        action = f"{'create' if create else 'update'} lease {self.config.namespace}/{self.config.name}"
        with kube_errors(action):
            if create:
                written = await self._client.create(lease)
            else:
                written = await self._client.replace(lease)
        self._lease = written
        if written.spec is not None:
            self._observe(written.spec)
            self._observed_at = asyncio.get_running_loop().time()

    async def _release(self) -> None:
        self._set_leading(False)
        if self._lease is None:
            return
        now = microtime()
        spec = LeaseSpec(
            leaseDurationSeconds=1,
            acquireTime=now,
            renewTime=now,
            leaseTransitions=(self._lease.spec.leaseTransitions if self._lease.spec else None) or 0,
        )
        try:
            async with asyncio.timeout(self.config.renew_deadline):
                await self._write(msgspec.structs.replace(self._lease, spec=spec), create=False)
            self._log.info("successfully released lease")
        except (ApiStatusError, TimeoutError) as error:  # it will expire on its own
            self._log.warning("failed to release lease", error=str(error))

    def _observe(self, spec: LeaseSpec) -> None:
        previous = self.leader
        self._observed = spec
        if spec.holderIdentity and spec.holderIdentity != previous:
            self._log.info("new leader elected", leader=spec.holderIdentity)
            if self._on_new_leader is not None:
                self._on_new_leader(spec.holderIdentity)

    def _set_leading(self, leading: bool) -> None:
        if leading == self._leading:
            return
        self._leading = leading
        LEADER_STATUS.labels(name=self.config.name).set(1 if leading else 0)
        if leading:
            self._log.info("successfully acquired lease")
            self.started_leading.set()
        else:
            self._log.info("stopped leading")
            self.stopped_leading.set()
