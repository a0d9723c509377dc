"""A claim's opaque device configs and the allocation results each one applies to (docs/data-path.md §7.2).

Works on the claim's typed status (``resourceclaim.ResourceClaimStatus``, from the API server or the
checkpoint):

- ``allocation_results`` reads ``status.allocation.devices.results``; a status without allocation
  yields nothing (legacy checkpoint entries have no status — upstream panics there);
- ``opaque_device_configs`` reads ``status.allocation.devices.config``: class-sourced configs first,
  then claim-sourced ones, other drivers' configs skipped, ours decoded (strictly for Prepare,
  leniently for data read back from the checkpoint);
- ``config_groups`` decides, per result of this driver, which config applies, following upstream's
  precedence: defaults lowest, then class configs, then claim configs; later entries win; a config
  naming the result's request wins over untargeted ones, and naming a request of the wrong device
  type is an error, while an untargeted config of the wrong type is skipped.

Error classes follow docs/errors.md §3.5: a config that does not decode or validate is permanent
(``ConfigError``); an unknown ``source``, a non-opaque config, a device this node cannot prepare or a
config aimed at the wrong device type is retryable, as upstream classifies them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from imexdra.api.constants import DRIVER_NAME, DeviceType
from imexdra.api.opaque import (
    ComputeDomainChannelConfig,
    ComputeDomainDaemonConfig,
    OpaqueConfig,
    decode_opaque_config,
)
from imexdra.common.errors import ConfigError, RetryableError
from imexdra.dra.resourceclaim import DeviceRequestAllocationResult, ResourceClaimStatus
from imexdra.kubeletplugin.slices import AllocatableDevice

#: Lowest-precedence configs: every result gets one, and their empty domainID fails validation.
DEFAULT_DAEMON_CONFIG = ComputeDomainDaemonConfig(domain_id="")
DEFAULT_CHANNEL_CONFIG = ComputeDomainChannelConfig(domain_id="")


class ConfigSource(StrEnum):
    """``status.allocation.devices.config[].source`` values, in precedence order (lowest first)."""

    FROM_CLASS = "FromClass"
    FROM_CLAIM = "FromClaim"


@dataclass(frozen=True, slots=True)
class DeviceConfig:
    """A decoded config of ours; empty ``requests`` means "every request it fits"."""

    requests: tuple[str, ...]
    config: OpaqueConfig


@dataclass(frozen=True, slots=True)
class ConfigGroup:
    """The results prepared under one config object, and their allocatable devices (same order)."""

    config: OpaqueConfig
    results: tuple[DeviceRequestAllocationResult, ...]
    devices: tuple[AllocatableDevice, ...]

    @property
    def device_type(self) -> DeviceType:
        """``channel`` or ``daemon``, by the config's kind."""
        return (
            DeviceType.CHANNEL if isinstance(self.config, ComputeDomainChannelConfig) else DeviceType.DAEMON
        )


def allocation_results(
    status: ResourceClaimStatus, *, driver: str = DRIVER_NAME
) -> list[DeviceRequestAllocationResult]:
    """The allocation results of ``driver`` in ``status`` (none when there is no allocation)."""
    if status.allocation is None:
        return []
    return [result for result in status.allocation.devices.results if result.driver == driver]


def non_admin_devices(status: ResourceClaimStatus) -> set[str]:
    """Names of this driver's devices in ``status`` held without admin access (overlap checks)."""
    return {result.device for result in allocation_results(status) if not result.admin_access}


def opaque_device_configs(status: ResourceClaimStatus, *, strict: bool) -> list[DeviceConfig]:
    """The configs of this driver in ``status``, class-sourced before claim-sourced, each decoded.

    Raises:
        RetryableError: a config has an unknown source or is not an opaque config.
        ConfigError: one of our configs does not decode or validate (message names the field).

    """
    by_source: dict[ConfigSource, list[DeviceConfig]] = {source: [] for source in ConfigSource}
    entries = status.allocation.devices.config if status.allocation is not None else ()
    for entry in entries:
        try:
            source = ConfigSource(entry.source)
        except ValueError:
            raise RetryableError(f"invalid config source: {entry.source!r}") from None
        if entry.opaque is None:
            raise RetryableError("only opaque parameters are supported by this driver")
        if entry.opaque.driver != DRIVER_NAME:
            continue
        try:
            config = decode_opaque_config(entry.opaque.parameters, strict=strict)
        except ConfigError as error:
            raise ConfigError(f"error decoding config parameters: {error}") from error
        by_source[source].append(DeviceConfig(entry.requests, config))
    return [config for source in ConfigSource for config in by_source[source]]


def _fits(config: OpaqueConfig, device: AllocatableDevice) -> bool:
    if isinstance(config, ComputeDomainChannelConfig):
        return device.type == DeviceType.CHANNEL
    return device.type == DeviceType.DAEMON


def _names_request(requests: Sequence[str], request: str) -> bool:
    # A config may name a request that has subrequests; it then applies to all of them ("req/sub").
    return request in requests or request.split("/", 1)[0] in requests


def config_groups(
    status: ResourceClaimStatus,
    allocatable: Mapping[str, AllocatableDevice],
    *,
    strict: bool,
) -> list[ConfigGroup]:
    """Group this driver's results by the config that applies to each, in precedence order.

    Raises:
        RetryableError: a result names a device that is not allocatable here, or a config names a
            request whose device it cannot configure; also see ``opaque_device_configs``.
        ConfigError: see ``opaque_device_configs``.

    """
    candidates = [
        DeviceConfig((), DEFAULT_DAEMON_CONFIG),
        DeviceConfig((), DEFAULT_CHANNEL_CONFIG),
        *opaque_device_configs(status, strict=strict),
    ]
    chosen: dict[int, list[tuple[DeviceRequestAllocationResult, AllocatableDevice]]] = {}
    for result in allocation_results(status):
        device = allocatable.get(result.device)
        if device is None:
            raise RetryableError(f"requested device is not allocatable: {result.device}")
        chosen.setdefault(_pick(candidates, result, device), []).append((result, device))
    return [
        ConfigGroup(
            config=candidates[index].config,
            results=tuple(result for result, _ in members),
            devices=tuple(device for _, device in members),
        )
        for index, members in sorted(chosen.items())
    ]


def _pick(
    candidates: Sequence[DeviceConfig], result: DeviceRequestAllocationResult, device: AllocatableDevice
) -> int:
    for index in reversed(range(len(candidates))):
        candidate = candidates[index]
        if candidate.requests:
            if not _names_request(candidate.requests, result.request):
                continue
            if not _fits(candidate.config, device):
                raise RetryableError(f"cannot apply {candidate.config.KIND} to request: {result.request}")
            return index
        if _fits(candidate.config, device):
            return index
    # Unreachable: the two defaults fit every channel and every daemon device.
    raise RetryableError(f"no config applies to request {result.request} (device {result.device})")
