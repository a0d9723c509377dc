"""Applying one config group of a claim: the checks, side effects and CDI edits of each claim kind.

Channel claims, driver-managed (docs/data-path.md §7.4): exactly one result; channel 0 must not be
held by another prepared claim (whichever channel was allocated); the ComputeDomain must exist in the
claim's namespace; the node gets ``resource.nvidia.com/computeDomain=<CD UID>`` (which schedules the
domain's IMEX daemon here); the local daemon must be Ready; then the edits are channel 0, or all 2048
channels for ``allocationMode: All`` — none on a node without an NVLink clique.

Channel claims under HostManagedIMEX (docs/data-path.md §10, in that order): exactly one result;
``allocationMode`` empty or ``Single`` (anything else is permanent); the channel-0 checkpoint conflict
check; the namespace assertion; a non-empty local clique ID (permanent otherwise, naming the missing
NVLink clique); the host's nvidia-imex answering ``READY`` on its command socket (``devices.hostimex``;
otherwise a ``RetryLaterError``: the pod event says why at once and the kubelet retries); then channel
0's device node. No node label, no wait on a driver daemon, no daemon settings.

Channel claims under channel isolation (host-managed only, docs/channel-isolation.md §6, in that
order): exactly one result, ``channel-N`` with ``N >= 1`` (channel 0 is domain isolation's: permanent)
and ``allocationMode`` ``Single``; the namespace assertion; the domain's ``status.channel`` is ``N``
(a different number is permanent, none yet is retryable: the controller's write may still be on its
way); no claim of another domain holds ``channel-N`` on this node (PrepareStarted or
PrepareCompleted; retryable, it clears when that claim is unprepared); then the host-managed checks
above and exactly ``channel<N>``'s device node. Under domain isolation a claim on ``channel-N`` with
``N >= 1`` was allocated under channel isolation and is refused permanently: the two kinds never mix.

Daemon claims (docs/data-path.md §7.5): refused permanently under HostManagedIMEX; else ``admit`` —
before anything is written — holds them to the domain's own IMEX daemon pods (``DaemonClaimOwners``,
docs/tenancy.md); then one device, the per-domain ``/imexd`` directory, and the daemon's environment,
mount and (with a clique) fabric-management node.

Each claim's checks that write nothing — for channel claims everything up to and including the
namespace assertion (and, under channel isolation, the channel checks) — run in ``check``, before
``DeviceState`` records PrepareStarted; the side effects (node label, daemon directory) and the
waits run in ``apply``, after it. So no checkpoint entry carries a ``domainID`` that was not checked
against the claim's namespace, and ``undo`` looks a PrepareStarted entry's domain up again before
removing a label, for entries older versions (or upstream) recorded before the check
(docs/tenancy.md).

The collaborators that reach the API are Protocols, implemented in ``domains``, ``nodelabels`` and
``daemonowners``. Which rules above apply is asked of the IMEX mode (``imex``, ``imexdra.api.imexmode``:
whether daemons run, whether the node is labelled, which ``allocationMode`` is served).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import structlog

from imexdra.api.constants import AllocationMode, DeviceType
from imexdra.api.imexmode import ImexManagement
from imexdra.api.opaque import ComputeDomainChannelConfig, ComputeDomainDaemonConfig
from imexdra.common.errors import DriverError, PermanentError, RetryableError, RetryLaterError
from imexdra.devices.hostimex import HostImexNotReadyError, HostImexReadiness
from imexdra.devices.procfs import ImexDevices
from imexdra.dra.resourceclaim import ClaimRef, ResourceClaim, recorded_status
from imexdra.kubeletplugin.cdi.spec import ContainerEdits, channel_edits, daemon_edits
from imexdra.kubeletplugin.checkpoint.model import Checkpoint, ClaimState, ConfigState
from imexdra.kubeletplugin.configs.claim import ConfigGroup, allocation_results, opaque_device_configs
from imexdra.kubeletplugin.domaindirs import prepare_domain_dir
from imexdra.kubeletplugin.paths import PluginPaths

_log = structlog.get_logger(__name__)

#: Where upstream's image ships the IMEX daemon config template copied into each domain directory.
DAEMON_CONFIG_TEMPLATE = Path("/templates/compute-domain-daemon-config.tmpl.cfg")

NO_CLIQUE_MESSAGE = "host-managed IMEX requires an NVLink clique on this node; NVML reports none"
DAEMON_CLAIMS_DISABLED_MESSAGE = (
    "ComputeDomain daemon claims are disabled under HostManagedIMEX: the host runs nvidia-imex, "
    "so this driver publishes and prepares no daemon devices"
)
NOT_READY_MESSAGE = "error asserting ComputeDomain Ready: current node not ready in ComputeDomain"
HOST_IMEX_NOT_READY_MESSAGE = "host nvidia-imex daemon readiness check failed"
RECREATE_ADVICE = (
    "recreate the workload's claim from its ComputeDomain's ResourceClaimTemplate "
    "(spec.channel.resourceClaimTemplate.name)"
)


@dataclass(frozen=True, slots=True)
class DomainInfo:
    """The identity of a ComputeDomain as the plugin needs it; ``channel`` is its ``status.channel``."""

    uid: str
    name: str
    namespace: str
    channel: int | None = None

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class DomainLookup(Protocol):
    """ComputeDomains by UID, across all namespaces."""

    async def get(self, uid: str) -> DomainInfo | None:
        """The ComputeDomain with ``uid``, or None when there is none."""
        ...


class NodeLabels(Protocol):
    """The ``resource.nvidia.com/computeDomain`` label of this node."""

    async def add(self, domain_uid: str) -> None:
        """Set the label to ``domain_uid``; raise ``RetryableError`` if it names another domain."""
        ...

    async def remove(self, domain_uid: str) -> None:
        """Remove the label if (and only if) it names ``domain_uid``."""
        ...


class DaemonReadiness(Protocol):
    """Whether this node's IMEX daemon of a domain is Ready (as the controller recorded it)."""

    async def node_ready(self, domain: DomainInfo, clique_id: str) -> bool:
        """True when this node's daemon of ``domain`` is Ready."""
        ...


class DaemonClaimOwners(Protocol):
    """Whether a daemon claim is held only by the IMEX daemon pods of its ComputeDomain."""

    async def check(self, claim: ResourceClaim, domain_uid: str) -> None:
        """Raise ``PermanentError`` unless it is; ``RetryableError`` when the API cannot tell."""
        ...


@dataclass(frozen=True, slots=True)
class CheckedGroup:
    """A config group that passed every check made before PrepareStarted is recorded."""

    group: ConfigGroup
    #: A channel group's ComputeDomain, found in the claim's namespace; None for a daemon group.
    domain: DomainInfo | None = None


@dataclass(frozen=True, slots=True)
class DomainUser:
    """Another claim on this node whose channel config names a domain, as its checkpoint entry says."""

    namespace: str
    #: PrepareCompleted: its namespace was checked when it was prepared.
    checked: bool


@dataclass(frozen=True, slots=True)
class AppliedConfig:
    """What preparing one group produced: its persisted state and its container edits (maybe none)."""

    config_state: ConfigState
    edits: ContainerEdits


@contextlib.contextmanager
def _retryable(what: str) -> Iterator[None]:
    """API and I/O failures of ``what`` are retryable (docs/errors.md §2), whatever their HTTP status."""
    try:
        yield
    except (PermanentError, OSError) as error:
        raise RetryableError(f"{what}: {error}") from error


@dataclass(slots=True)
class ConfigApplier:
    """Applies channel and daemon configs on this node; see the module docstring for the rules."""

    #: Who runs nvidia-imex: whether daemon claims are served, channel claims label the node and wait
    #: for the domain's daemons, and which allocation modes a channel claim may ask.
    imex: ImexManagement
    devices: ImexDevices
    paths: PluginPaths
    clique_id: Callable[[], str]
    domains: DomainLookup
    labels: NodeLabels
    readiness: DaemonReadiness
    daemon_owners: DaemonClaimOwners
    host_imex: HostImexReadiness
    #: ``--imex-isolation=channel``: each domain has its own channel (docs/channel-isolation.md).
    channel_isolation: bool = False
    daemon_config_template: Path = DAEMON_CONFIG_TEMPLATE

    async def admit(self, group: ConfigGroup, claim: ResourceClaim) -> None:
        """Refuse, before anything is written, a daemon group this node must never prepare for ``claim``."""
        config = group.config
        if not isinstance(config, ComputeDomainDaemonConfig):
            return
        if not self.imex.runs_imex_daemons:
            raise PermanentError(DAEMON_CLAIMS_DISABLED_MESSAGE)
        await self.daemon_owners.check(claim, config.domain_id)

    async def check(self, group: ConfigGroup, claim: ClaimRef, checkpoint: Checkpoint) -> CheckedGroup:
        """Run ``group``'s checks that write nothing, the namespace assertion last, in their fixed order.

        Called before PrepareStarted is recorded, so a claim refused here leaves no checkpoint entry
        whose unchecked ``domainID`` an unprepare could act on. ``checkpoint`` is the state read under
        ``pu.lock``.
        """
        config = group.config
        if not isinstance(config, ComputeDomainChannelConfig):
            return CheckedGroup(group)
        if len(group.results) != 1:
            requests = [result.request for result in group.results]
            raise RetryableError(
                f"applyComputeDomainChannelConfig: unexpected results for requests {requests}"
            )
        number = group.devices[0].id
        if self.channel_isolation:
            domain = await self._check_isolated_channel(config, number, claim, checkpoint)
            return CheckedGroup(group, domain)
        self.imex.check_allocation_mode(config.allocation_mode)
        if number != 0:
            raise PermanentError(
                f"claim was allocated channel-{number}, which only channel isolation publishes; this driver "
                f"runs domain isolation, where every ComputeDomain uses channel 0: {RECREATE_ADVICE}"
            )
        assert_channel_not_allocated(checkpoint, 0)
        return CheckedGroup(group, await self._domain_of(config.domain_id, claim))

    async def apply(self, checked: CheckedGroup) -> AppliedConfig:
        """Prepare a group that passed ``check``: its side effects and container edits."""
        config = checked.group.config
        if isinstance(config, ComputeDomainChannelConfig):
            assert checked.domain is not None  # check() found every channel group's domain
            return await self._channel(config, checked.group.devices[0].id, checked.domain)
        return await self._daemon(config, checked.group)

    async def undo(
        self, group: ConfigGroup, *, namespace: str, checked: bool, users: Iterable[DomainUser] = ()
    ) -> None:
        """Unprepare ``group`` of a claim in ``namespace``: drop its domain's node label unless still needed.

        Only a ``domainID`` checked against its claim's namespace is acted on. A PrepareCompleted entry
        (``checked``) passed the check; a PrepareStarted one may come from a version that recorded it
        before checking (upstream does), so its domain is looked up again, and a domain of another
        namespace keeps its label. The same goes for ``users``, the other claims on this node naming
        the domain: only those whose claim may use it keep the label.
        """
        if group.device_type != DeviceType.CHANNEL or not self.imex.labels_nodes:
            return
        domain_uid = group.config.domain_id
        if not checked and not await self._may_use(domain_uid, namespace):
            _log.warning(
                "Not removing the node label of a ComputeDomain of another namespace: the claim was "
                "refused for it",
                compute_domain=domain_uid,
                namespace=namespace,
            )
            return
        for user in users:
            if user.checked or await self._may_use(domain_uid, user.namespace):
                return
        with _retryable("error removing node label"):
            await self.labels.remove(domain_uid)

    async def _may_use(self, domain_uid: str, namespace: str) -> bool:
        """False only when ``domain_uid`` is a ComputeDomain of another namespace than ``namespace``."""
        with _retryable("error asserting ComputeDomain's namespace"):
            domain = await self.domains.get(domain_uid)
        return domain is None or domain.namespace == namespace

    async def _channel(
        self, config: ComputeDomainChannelConfig, number: int, domain: DomainInfo
    ) -> AppliedConfig:
        state = ConfigState(type=DeviceType.CHANNEL.value, compute_domain=config.domain_id)
        clique_id = self.clique_id()
        if self.channel_isolation:
            await self._host_imex_ready(clique_id)
            return AppliedConfig(state, self._channels((number,)))
        if not self.imex.runs_imex_daemons:
            await self._host_imex_ready(clique_id)
            return AppliedConfig(state, self._channels(range(1)))
        with _retryable("error adding node label"):
            await self.labels.add(config.domain_id)
        if not await self.readiness.node_ready(domain, clique_id):
            raise RetryableError(NOT_READY_MESSAGE)
        if not clique_id:
            return AppliedConfig(state, ContainerEdits())
        count = self.devices.channel_count if config.allocation_mode == AllocationMode.ALL else 1
        return AppliedConfig(state, self._channels(range(count)))

    async def _check_isolated_channel(
        self, config: ComputeDomainChannelConfig, number: int, claim: ClaimRef, checkpoint: Checkpoint
    ) -> DomainInfo:
        """A channel claim under channel isolation: the checks of docs/channel-isolation.md §6, in order."""
        if number == 0:
            raise PermanentError(
                "claim was allocated channel-0, the shared channel of domain isolation; this driver runs "
                f"channel isolation, where each ComputeDomain has a channel of its own: {RECREATE_ADVICE}"
            )
        if config.allocation_mode != AllocationMode.SINGLE:
            raise PermanentError(
                f'allocationMode "{config.allocation_mode}" is not supported under channel isolation: '
                "a ComputeDomain's pods get its own channel only; use Single"
            )
        domain = await self._domain_of(config.domain_id, claim)
        if domain.channel is None:
            raise RetryableError(
                f"ComputeDomain {domain} has no IMEX channel recorded yet (status.channel): waiting for "
                "the controller to give it one"
            )
        if domain.channel != number:
            raise PermanentError(
                f"claim was allocated channel-{number} but ComputeDomain {domain} has channel "
                f"{domain.channel}: a claim may only hold its own ComputeDomain's channel; {RECREATE_ADVICE}"
            )
        assert_channel_free_for(checkpoint, number, domain_uid=domain.uid, claim_uid=claim.uid)
        return domain

    async def _host_imex_ready(self, clique_id: str) -> None:
        """Host-managed IMEX: a clique on this node and the host's nvidia-imex answering READY."""
        if not clique_id:
            raise PermanentError(NO_CLIQUE_MESSAGE)
        try:
            await self.host_imex.check()
        except HostImexNotReadyError as error:
            raise RetryLaterError(f"{HOST_IMEX_NOT_READY_MESSAGE}: {error}") from error

    async def _daemon(self, config: ComputeDomainDaemonConfig, group: ConfigGroup) -> AppliedConfig:
        distinct = {device.name for device in group.devices}
        if len(distinct) != 1:
            requests = [result.request for result in group.results]
            raise RetryableError(f"only expected 1 device for requests {requests}, got {sorted(distinct)}")
        domain_dir = self.paths.domain_dir(config.domain_id)
        with _retryable(f"error preparing daemon directory {domain_dir}"):
            await asyncio.to_thread(self._prepare_domain_dir, config.domain_id)
        with _retryable("error looking up ComputeDomain"):
            domain = await self.domains.get(config.domain_id)
        if domain is None:
            raise RetryableError(f"compute domain not found: {config.domain_id}")
        clique_id = self.clique_id()
        with _retryable("error reading the fabric-imex-mgmt capability"):
            fabric_mgmt = self.devices.fabric_mgmt() if clique_id else None
        edits = daemon_edits(
            clique_id=clique_id,
            domain_uid=domain.uid,
            domain_name=domain.name,
            domain_namespace=domain.namespace,
            domain_dir=domain_dir,
            fabric_mgmt=fabric_mgmt,
        )
        return AppliedConfig(
            ConfigState(type=DeviceType.DAEMON.value, compute_domain=config.domain_id), edits
        )

    async def _domain_of(self, domain_uid: str, claim: ClaimRef) -> DomainInfo:
        """The channel claim's domain, which must exist in the claim's namespace (the one lookup)."""
        # Any failure here is permanent, "not found" included: the tenant boundary fails closed
        # (docs/errors.md §2).
        try:
            domain = await self.domains.get(domain_uid)
        except DriverError as error:
            raise PermanentError(f"error asserting ComputeDomain's namespace: {error}") from error
        # One answer for "no such domain" and "a domain of another namespace": the claim's owner learns
        # nothing of other namespaces (docs/tenancy.md, "Events and status").
        if domain is None or domain.namespace != claim.namespace:
            raise PermanentError(
                f"error asserting ComputeDomain's namespace: no ComputeDomain with UID {domain_uid} in the "
                f"ResourceClaim's namespace {claim.namespace}: a claim may only use a ComputeDomain of its "
                "own namespace, through that ComputeDomain's spec.channel.resourceClaimTemplate.name"
            )
        return domain

    def _channels(self, channels: Iterable[int]) -> ContainerEdits:
        with _retryable("error building IMEX channel device nodes"):
            return channel_edits(self.devices.channel(channel) for channel in channels)

    def _prepare_domain_dir(self, domain_uid: str) -> None:
        # The directory is the daemon container's to write: domaindirs never follows a link in it.
        template = self.daemon_config_template
        data = template.read_bytes() if template.is_file() else None
        prepare_domain_dir(self.paths.domains_dir, domain_uid, data)


def assert_channel_not_allocated(checkpoint: Checkpoint, channel: int) -> None:
    """Fail (retryably) if a prepared claim holds IMEX channel ``channel`` (docs/data-path.md §7.4).

    Only PrepareCompleted entries count; daemon devices are ignored.
    """
    for uid, claim in checkpoint.claims.items():
        if claim.state != ClaimState.PREPARE_COMPLETED:
            continue
        for device in claim.all_devices():
            if device.type == DeviceType.CHANNEL and device.id == channel:
                # The holder may be another namespace's: its UID is not named (docs/tenancy.md).
                _log.info("Channel held by a prepared claim", channel=channel, holder=uid)
                raise RetryableError(
                    f"allocation failed: channel {channel} already allocated by another claim "
                    "(according to checkpoint)"
                )


def assert_channel_free_for(checkpoint: Checkpoint, channel: int, *, domain_uid: str, claim_uid: str) -> None:
    """Fail (retryably) if a claim of another domain holds ``channel-<channel>`` on this node.

    The node invariant of channel isolation (docs/channel-isolation.md §6): never one channel prepared
    for two domains. PrepareStarted entries count too (their side effects may be half done), as does
    an entry whose domain cannot be read back.
    """
    device = f"{DeviceType.CHANNEL.value}-{channel}"
    for uid, entry in checkpoint.claims.items():
        if uid == claim_uid or entry.state not in (ClaimState.PREPARE_STARTED, ClaimState.PREPARE_COMPLETED):
            continue
        status = recorded_status(entry.status)
        if not any(result.device == device for result in allocation_results(status)):
            continue
        try:
            owners = {
                c.config.domain_id
                for c in opaque_device_configs(status, strict=False)
                if isinstance(c.config, ComputeDomainChannelConfig)
            }
        except DriverError:
            owners = set()
        if owners != {domain_uid}:
            _log.info("Channel held by a claim of another domain", channel=channel, holder=uid)
            raise RetryableError(
                f"channel {channel} is held on this node by a claim of another ComputeDomain "
                "(according to checkpoint); waiting for it to be unprepared"
            )
