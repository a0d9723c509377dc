"""Who runs nvidia-imex: one type per IMEX mode, chosen once where a process is wired.

Upstream threads a ``hostManaged`` boolean through its components and branches on it; here the mode is
an object, :class:`DriverManagedImex` (the default) or :class:`HostManagedImex` (feature gate
``HostManagedIMEX``, docs/host-managed.md), chosen by :func:`choose_imex_mode` from the flags and the
feature gates. Each component asks the object the question it has — does a node run the driver's IMEX
daemons, which devices the node publishes, whether cliques apply, what a channel claim's config may ask,
which isolation the install may run — and every answer is decided here, once per mode
(docs/architecture.md §4.1).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from imexdra.api.constants import AllocationMode, DeviceType
from imexdra.api.featuregates import FeatureGates, Gate
from imexdra.api.flags.common import ImexIsolation, ImexMode, ImexSettings
from imexdra.common.errors import ConfigError, PermanentError


class ImexManagement(ABC):
    """The IMEX mode of the install: what each component does differently in it."""

    #: The ``--imex-mode`` value that names the mode (``imexMode`` in the startup logs).
    mode: ClassVar[ImexMode]
    #: Whether every node of a domain runs the driver's compute-domain daemon: the controller makes
    #: DaemonSets, daemon claim templates and NetworkPolicies and follows daemon pods and nodes; a
    #: domain is Ready when its daemons are (else when its workload claim template exists); the plugin
    #: prepares daemon claims, and its base CDI spec carries the daemon's parts.
    runs_imex_daemons: ClassVar[bool]
    #: Whether the plugin labels its node with the domains whose channels it prepares (the daemons'
    #: DaemonSets select on that label) and so watches its Node.
    labels_nodes: ClassVar[bool]
    #: The device types the node's ResourceSlice publishes (which channels: the isolation's rule).
    published_device_types: ClassVar[tuple[DeviceType, ...]]

    @abstractmethod
    def cliques_enabled(self, gates: FeatureGates) -> bool:
        """Whether daemon membership goes into ComputeDomainClique objects (else into the domain's status)."""

    @abstractmethod
    def checks_driver_version(self, gates: FeatureGates) -> bool:
        """Whether the plugin checks at startup that the driver supports the daemons' DNS names."""

    @abstractmethod
    def admit_isolation(self, isolation: ImexIsolation) -> ImexIsolation:
        """The isolation to run with, given ``--imex-isolation``; ``ConfigError`` if the mode refuses it."""

    @abstractmethod
    def check_allocation_mode(self, allocation_mode: AllocationMode) -> None:
        """Raise ``PermanentError`` when a domain-isolated channel claim's ``allocationMode`` is refused."""


@dataclass(frozen=True, slots=True)
class DriverManagedImex(ImexManagement):
    """The default: the driver runs an IMEX daemon per domain on each of its nodes."""

    mode: ClassVar[ImexMode] = ImexMode.DRIVER_MANAGED
    runs_imex_daemons: ClassVar[bool] = True
    labels_nodes: ClassVar[bool] = True
    published_device_types: ClassVar[tuple[DeviceType, ...]] = (DeviceType.CHANNEL, DeviceType.DAEMON)

    def cliques_enabled(self, gates: FeatureGates) -> bool:
        """The ``ComputeDomainCliques`` gate decides."""
        return gates.enabled(Gate.COMPUTE_DOMAIN_CLIQUES)

    def checks_driver_version(self, gates: FeatureGates) -> bool:
        """The ``IMEXDaemonsWithDNSNames`` gate decides."""
        return gates.enabled(Gate.IMEX_DAEMONS_WITH_DNS_NAMES)

    def admit_isolation(self, isolation: ImexIsolation) -> ImexIsolation:
        """Domain isolation only: each domain's own daemons already isolate it."""
        if isolation is ImexIsolation.DOMAIN:
            return ImexIsolation.DOMAIN
        raise ConfigError(
            f"--imex-isolation={ImexIsolation.CHANNEL.value} (IMEX_ISOLATION) needs host-managed IMEX: "
            "with driver-managed IMEX every ComputeDomain runs its own IMEX daemon on each of its "
            "nodes, which already isolates domains from each other. "
            f'Use "{ImexIsolation.DOMAIN.value}", or turn on feature gate '
            f"{Gate.HOST_MANAGED_IMEX.value}=true if the hosts run nvidia-imex themselves",
            field="imex_isolation",
        )

    def check_allocation_mode(self, allocation_mode: AllocationMode) -> None:
        """Single and All are both served (All: every channel of the node)."""


@dataclass(frozen=True, slots=True)
class HostManagedImex(ImexManagement):
    """``HostManagedIMEX``: the hosts run nvidia-imex; the driver only hands out channels."""

    mode: ClassVar[ImexMode] = ImexMode.HOST_MANAGED
    runs_imex_daemons: ClassVar[bool] = False
    labels_nodes: ClassVar[bool] = False
    published_device_types: ClassVar[tuple[DeviceType, ...]] = (DeviceType.CHANNEL,)

    def cliques_enabled(self, gates: FeatureGates) -> bool:
        """Never: no daemon runs, so no clique exists (the chart grants no access to them)."""
        return False

    def checks_driver_version(self, gates: FeatureGates) -> bool:
        """Never: no daemon of the driver's resolves peers by name."""
        return False

    def admit_isolation(self, isolation: ImexIsolation) -> ImexIsolation:
        """Both isolations (docs/channel-isolation.md)."""
        return isolation

    def check_allocation_mode(self, allocation_mode: AllocationMode) -> None:
        """Only Single (or unset): the host's IMEX domain is shared, channel 0 is the one handed out."""
        if allocation_mode != AllocationMode.SINGLE:
            raise PermanentError(
                f'allocationMode "{allocation_mode}" is not supported under HostManagedIMEX '
                "(only Single, or unset, is allowed)"
            )


DRIVER_MANAGED_IMEX = DriverManagedImex()
HOST_MANAGED_IMEX = HostManagedImex()


def choose_imex_mode(imex: ImexSettings, gates: FeatureGates) -> ImexManagement:
    """The install's mode: the gate decides; ``--imex-mode=hostManaged`` needs it on (``ConfigError``)."""
    enabled = gates.enabled(Gate.HOST_MANAGED_IMEX)
    if imex.imex_mode is ImexMode.HOST_MANAGED and not enabled:
        raise ConfigError(
            f"{ImexMode.HOST_MANAGED.value} requires feature gate {Gate.HOST_MANAGED_IMEX.value}=true",
            field="imex_mode",
        )
    return HOST_MANAGED_IMEX if enabled else DRIVER_MANAGED_IMEX
