"""Which ResourceClaim holds which IMEX channel for which domain: the controller's claim projection.

Under channel isolation the channel book (``channels``) must know every number a claim's allocation
still holds (docs/channel-isolation.md §4). Claims are many and large, and the book needs three facts
of each: its UID, the channel numbers ``N >= 1`` of our driver in its allocation, and the domain its
ComputeDomainChannelConfig names. ``ChannelClaim`` is a slim stand-in for ResourceClaim that the
informer decodes straight from the wire: it turns the allocation into a ``ClaimHold`` at once and
keeps nothing else but the name, namespace, UID and resourceVersion the informer needs to diff a
relist. A claim holding no such number keeps no hold at all.

In-use protection (docs/in-use-protection.md §3) asks one more fact of the same claims: which pods
use a domain's channel. ``ClaimUse`` says it for any channel of our driver, channel 0 included: the
domain its channel config names and the pods ``status.reservedFor`` lists. Daemon claims carry a
ComputeDomainDaemonConfig, not a channel config, so they never count.

Under gate ComputeDomainBindingConditions (docs/binding-conditions.md) a claim whose allocated channel
devices carry our binding condition and have neither it nor the failure condition set yet is a
``PendingBinding``: the scheduler holds its pod until the controller decides. ``ClaimUse.node`` (the
allocation's node) lets the controller take back a node label it set once no claim needs it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar

import msgspec

from imexdra.api.constants import (
    BINDING_CONDITION_DAEMON_READY,
    BINDING_FAILURE_CONDITION,
    DRIVER_NAME,
    KIND_CHANNEL_CONFIG,
)
from imexdra.common.kube.models.meta_v1 import ObjectMeta
from imexdra.common.kube.models.resource_v1 import ResourceClaim
from imexdra.common.kube.resource import ApiInfo, Model
from imexdra.controller.channels import ClaimHold

#: The device names of channels the plugin publishes (``channel-<id>``, kubeletplugin/slices.py).
_CHANNEL_DEVICE = re.compile(r"channel-(0|[1-9][0-9]*)")


@dataclass(frozen=True, slots=True)
class ClaimUse:
    """A claim allocated one of a domain's channels, and the pods it is reserved for (maybe none)."""

    #: The ``domainID`` of the claim's ComputeDomainChannelConfig.
    domain: str
    #: ``namespace/name`` of every pod in ``status.reservedFor``.
    pods: tuple[str, ...]
    #: The node the allocation is bound to (``""`` if it names none, e.g. a network-attached device).
    node: str = ""


@dataclass(frozen=True, slots=True)
class PendingBinding:
    """A claim whose pod the scheduler holds until its channel devices' binding conditions are set."""

    #: The ``domainID`` its ComputeDomainChannelConfig names; ``""`` if it carries none.
    domain: str
    #: The allocated node.
    node: str
    #: ``(pool, device)`` of each of our allocated devices with the binding condition.
    devices: tuple[tuple[str, str], ...]
    #: Whether the claim's ``status.devices`` list exists (another driver's entries): a JSON patch
    #: appends to it, or else adds it.
    has_device_statuses: bool = False


class _Result(msgspec.Struct, kw_only=True):
    driver: str = ""
    pool: str = ""
    device: str = ""
    binding_conditions: list[str] = msgspec.field(name="bindingConditions", default_factory=list)


class _Opaque(msgspec.Struct, kw_only=True):
    driver: str = ""
    #: Left raw: any driver's parameters may be here, and one odd object must not fail a whole LIST.
    parameters: msgspec.Raw = msgspec.Raw(b"null")


class _Config(msgspec.Struct, kw_only=True):
    opaque: _Opaque | None = None


class _Devices(msgspec.Struct, kw_only=True):
    results: list[_Result] = msgspec.field(default_factory=list)
    config: list[_Config] = msgspec.field(default_factory=list)


class _MatchField(msgspec.Struct, kw_only=True):
    key: str = ""
    operator: str = ""
    values: list[str] = msgspec.field(default_factory=list)


class _Term(msgspec.Struct, kw_only=True):
    match_fields: list[_MatchField] = msgspec.field(name="matchFields", default_factory=list)


class _NodeSelector(msgspec.Struct, kw_only=True):
    terms: list[_Term] = msgspec.field(name="nodeSelectorTerms", default_factory=list)


class _Allocation(msgspec.Struct, kw_only=True):
    devices: _Devices | None = None
    node_selector: _NodeSelector | None = msgspec.field(name="nodeSelector", default=None)


class _Condition(msgspec.Struct, kw_only=True):
    type: str = ""
    status: str = ""


class _DeviceStatus(msgspec.Struct, kw_only=True):
    driver: str = ""
    pool: str = ""
    device: str = ""
    conditions: list[_Condition] = msgspec.field(default_factory=list)


class _Consumer(msgspec.Struct, kw_only=True):
    resource: str = ""
    name: str = ""


class _Status(msgspec.Struct, kw_only=True):
    allocation: _Allocation | None = None
    reserved_for: list[_Consumer] = msgspec.field(name="reservedFor", default_factory=list)
    devices: list[_DeviceStatus] = msgspec.field(default_factory=list)


class _ChannelParameters(msgspec.Struct, kw_only=True):
    kind: str = ""
    domain_id: str = msgspec.field(name="domainID", default="")


def channel_number(device: str) -> int | None:
    """``N`` for a device named ``channel-N`` with ``N >= 1``; None for anything else."""
    channel = _channel_id(device)
    return channel if channel else None


def _channel_id(device: str) -> int | None:
    """``N`` for a device named ``channel-N``, channel 0 included; None for anything else."""
    match = _CHANNEL_DEVICE.fullmatch(device)
    return int(match.group(1)) if match else None


def _domain_of(configs: Iterable[_Config]) -> str | None:
    """The ``domainID`` of the first ComputeDomainChannelConfig of our driver, if any."""
    for config in configs:
        opaque = config.opaque
        if opaque is None or opaque.driver != DRIVER_NAME:
            continue
        try:
            parameters = msgspec.json.decode(opaque.parameters, type=_ChannelParameters)
        except msgspec.DecodeError:  # not an object: not ours to judge, the plugin refuses it
            continue
        if parameters.kind == KIND_CHANNEL_CONFIG and parameters.domain_id:
            return parameters.domain_id
    return None


def hold_of(status: _Status, namespace: str) -> ClaimHold | None:
    """The channels ``>= 1`` of our driver a claim of ``namespace`` holds, with its domain; None if none."""
    devices = status.allocation.devices if status.allocation is not None else None
    if devices is None:
        return None
    numbers = frozenset(
        number
        for result in devices.results
        if result.driver == DRIVER_NAME and (number := channel_number(result.device)) is not None
    )
    if not numbers:
        return None
    return ClaimHold(domain=_domain_of(devices.config), channels=numbers, namespace=namespace)


def use_of(status: _Status, namespace: str) -> ClaimUse | None:
    """Which domain's channel a decoded claim status holds and for which pods; None if no channel."""
    devices = status.allocation.devices if status.allocation is not None else None
    if devices is None:
        return None
    if not any(r.driver == DRIVER_NAME and _channel_id(r.device) is not None for r in devices.results):
        return None
    domain = _domain_of(devices.config)
    if domain is None:
        return None
    pods = tuple(f"{namespace}/{c.name}" for c in status.reserved_for if c.resource == "pods" and c.name)
    assert status.allocation is not None
    return ClaimUse(domain=domain, pods=pods, node=_allocated_node(status.allocation))


def _allocated_node(allocation: _Allocation) -> str:
    """The one node a node-local allocation selects (``metadata.name In [node]``), else ``""``."""
    terms = allocation.node_selector.terms if allocation.node_selector is not None else []
    for term in terms:
        for field in term.match_fields:
            if field.key == "metadata.name" and field.operator == "In" and len(field.values) == 1:
                return field.values[0]
    return ""


def binding_of(status: _Status) -> PendingBinding | None:
    """The claim's binding still to be decided by us, or None (none asked, or already decided)."""
    allocation = status.allocation
    devices = allocation.devices if allocation is not None else None
    if allocation is None or devices is None:
        return None
    waiting = tuple(
        (r.pool, r.device)
        for r in devices.results
        if r.driver == DRIVER_NAME and BINDING_CONDITION_DAEMON_READY in r.binding_conditions
    )
    node = _allocated_node(allocation)
    if not waiting or not node:
        return None
    decided = {
        (d.pool, d.device)
        for d in status.devices
        if d.driver == DRIVER_NAME
        and any(
            c.status == "True" and c.type in (BINDING_CONDITION_DAEMON_READY, BINDING_FAILURE_CONDITION)
            for c in d.conditions
        )
    }
    if all(device in decided for device in waiting):
        return None
    return PendingBinding(
        domain=_domain_of(devices.config) or "",
        node=node,
        devices=waiting,
        has_device_statuses=bool(status.devices),
    )


class ChannelClaim(Model, kw_only=True):
    """A ResourceClaim as the controller keeps it: identity and the channels it holds, nothing more."""

    _api_info: ClassVar[ApiInfo] = ResourceClaim._api_info

    metadata: ObjectMeta | None = None
    #: Decoded from the wire, turned into ``hold`` and dropped in ``__post_init__``.
    status: _Status | None = None
    #: Filled in here, never on the wire (no Kubernetes object has a key of this name).
    hold: ClaimHold | None = msgspec.field(default=None, name="-imexdra-hold")
    #: Filled in here too: the domain whose channel it holds and the pods using it.
    use: ClaimUse | None = msgspec.field(default=None, name="-imexdra-use")
    #: And the binding conditions still to set (gate ComputeDomainBindingConditions).
    binding: PendingBinding | None = msgspec.field(default=None, name="-imexdra-binding")

    def __post_init__(self) -> None:
        """Keep only what the channel book, in-use protection and the informer need."""
        meta = self.metadata
        if self.status is not None:
            namespace = (meta.namespace if meta else None) or ""
            self.hold = hold_of(self.status, namespace)
            self.use = use_of(self.status, namespace)
            self.binding = binding_of(self.status)
            self.status = None
        if meta is not None:
            self.metadata = ObjectMeta(
                name=meta.name, namespace=meta.namespace, uid=meta.uid, resourceVersion=meta.resourceVersion
            )


def claim_uid(claim: ChannelClaim) -> str | None:
    """The claim's UID (the channel book's key for it)."""
    return claim.metadata.uid if claim.metadata else None


def index_by_used_domain(claim: ChannelClaim) -> list[str]:
    """Index function: the UID of the domain whose channel the claim holds (``ClaimUse.domain``)."""
    return [claim.use.domain] if claim.use is not None else []
