"""The IMEX mode types: how the mode is chosen, and each question answered per mode."""

from __future__ import annotations

import pytest

from imexdra.api.constants import AllocationMode, DeviceType
from imexdra.api.featuregates import resolve_feature_gates
from imexdra.api.flags.common import ImexIsolation, ImexMode, ImexSettings
from imexdra.api.imexmode import (
    DRIVER_MANAGED_IMEX,
    HOST_MANAGED_IMEX,
    DriverManagedImex,
    HostManagedImex,
    ImexManagement,
    choose_imex_mode,
)
from imexdra.common.errors import ConfigError, PermanentError

MODES = pytest.mark.parametrize("imex", [DRIVER_MANAGED_IMEX, HOST_MANAGED_IMEX], ids=["driver", "host"])


@pytest.mark.parametrize(
    ("mode", "gates", "expected"),
    [
        (ImexMode.DRIVER_MANAGED, "", DRIVER_MANAGED_IMEX),
        (ImexMode.DRIVER_MANAGED, "HostManagedIMEX=true", HOST_MANAGED_IMEX),
        (ImexMode.HOST_MANAGED, "HostManagedIMEX=true", HOST_MANAGED_IMEX),
        (ImexMode.HOST_MANAGED, "HostManagedIMEXDaemon=true", HOST_MANAGED_IMEX),
    ],
    ids=["default", "gate-decides", "mode-and-gate", "mode-and-upstream-gate"],
)
def test_the_gate_chooses_the_mode(mode: ImexMode, gates: str, expected: ImexManagement) -> None:
    """The HostManagedIMEX gate selects host mode; IMEX_MODE may agree with it."""
    imex = ImexSettings(imex_mode=mode, imex_isolation=ImexIsolation.DOMAIN)
    assert choose_imex_mode(imex, resolve_feature_gates(gates)) == expected


def test_host_managed_mode_without_gate_is_rejected() -> None:
    """IMEX_MODE=hostManaged without the gate is a ConfigError, as upstream requires its gate."""
    imex = ImexSettings(imex_mode=ImexMode.HOST_MANAGED, imex_isolation=ImexIsolation.DOMAIN)
    with pytest.raises(ConfigError) as caught:
        choose_imex_mode(imex, resolve_feature_gates(""))
    assert caught.value.field == "imex_mode"
    assert str(caught.value) == "imex_mode: hostManaged requires feature gate HostManagedIMEX=true"


def test_each_mode_is_one_value() -> None:
    """The modes are frozen values: equal when of the same type, named by their --imex-mode value."""
    assert DriverManagedImex() == DRIVER_MANAGED_IMEX != HOST_MANAGED_IMEX == HostManagedImex()
    assert DRIVER_MANAGED_IMEX.mode is ImexMode.DRIVER_MANAGED
    assert HOST_MANAGED_IMEX.mode is ImexMode.HOST_MANAGED


@MODES
def test_domain_isolation_works_in_both_modes(imex: ImexManagement) -> None:
    """Domain isolation (upstream's only one) is what both IMEX modes run with by default."""
    assert imex.admit_isolation(ImexIsolation.DOMAIN) is ImexIsolation.DOMAIN


def test_channel_isolation_is_refused_with_driver_managed_imex() -> None:
    """Channel isolation under driver-managed IMEX says why it adds nothing and what would work."""
    with pytest.raises(ConfigError) as caught:
        DRIVER_MANAGED_IMEX.admit_isolation(ImexIsolation.CHANNEL)
    assert caught.value.field == "imex_isolation"
    assert str(caught.value) == (
        "imex_isolation: --imex-isolation=channel (IMEX_ISOLATION) needs host-managed IMEX: "
        "with driver-managed IMEX every ComputeDomain runs its own IMEX daemon on each of its nodes, "
        'which already isolates domains from each other. Use "domain", or turn on feature gate '
        "HostManagedIMEX=true if the hosts run nvidia-imex themselves"
    )


def test_channel_isolation_with_host_managed_imex() -> None:
    """Host-managed IMEX is what channel isolation needs: the setting is taken as given."""
    assert HOST_MANAGED_IMEX.admit_isolation(ImexIsolation.CHANNEL) is ImexIsolation.CHANNEL


def test_driver_managed_imex_runs_daemons_and_labels_nodes() -> None:
    """Driver-managed: daemons on every node of a domain, node labels for them, daemon-0 published."""
    assert DRIVER_MANAGED_IMEX.runs_imex_daemons
    assert DRIVER_MANAGED_IMEX.labels_nodes
    assert DRIVER_MANAGED_IMEX.published_device_types == (DeviceType.CHANNEL, DeviceType.DAEMON)


def test_host_managed_imex_has_no_daemons_labels_or_daemon_device() -> None:
    """Host-managed: the host runs nvidia-imex, so no daemon, node label or daemon device."""
    assert not HOST_MANAGED_IMEX.runs_imex_daemons
    assert not HOST_MANAGED_IMEX.labels_nodes
    assert HOST_MANAGED_IMEX.published_device_types == (DeviceType.CHANNEL,)


@pytest.mark.parametrize(
    ("gates", "driver", "host"),
    [("", True, False), ("ComputeDomainCliques=false", False, False)],
    ids=["cliques-gate-on", "cliques-gate-off"],
)
def test_cliques_follow_the_gate_in_driver_managed_mode_only(gates: str, driver: bool, host: bool) -> None:
    """ComputeDomainCliques decides for driver-managed IMEX; host-managed IMEX has no cliques."""
    resolved = resolve_feature_gates(gates)
    assert DRIVER_MANAGED_IMEX.cliques_enabled(resolved) is driver
    assert HOST_MANAGED_IMEX.cliques_enabled(resolved) is host


@pytest.mark.parametrize(
    ("gates", "driver"),
    [("ComputeDomainCliques=false,IMEXDaemonsWithDNSNames=false", False), ("", True)],
    ids=["dns-names-off", "dns-names-on"],
)
def test_driver_version_is_checked_for_dns_names_in_driver_managed_mode_only(
    gates: str, driver: bool
) -> None:
    """The DNS-names driver check follows IMEXDaemonsWithDNSNames, and never runs host-managed."""
    resolved = resolve_feature_gates(gates)
    assert DRIVER_MANAGED_IMEX.checks_driver_version(resolved) is driver
    assert not HOST_MANAGED_IMEX.checks_driver_version(resolved)


@pytest.mark.parametrize("allocation_mode", list(AllocationMode))
def test_driver_managed_imex_serves_every_allocation_mode(allocation_mode: AllocationMode) -> None:
    """Single and All are both served with driver-managed IMEX."""
    DRIVER_MANAGED_IMEX.check_allocation_mode(allocation_mode)


def test_host_managed_imex_serves_single_only() -> None:
    """Host-managed IMEX refuses All with upstream's words, and serves Single."""
    HOST_MANAGED_IMEX.check_allocation_mode(AllocationMode.SINGLE)
    with pytest.raises(PermanentError) as caught:
        HOST_MANAGED_IMEX.check_allocation_mode(AllocationMode.ALL)
    assert str(caught.value) == (
        'allocationMode "All" is not supported under HostManagedIMEX (only Single, or unset, is allowed)'
    )
