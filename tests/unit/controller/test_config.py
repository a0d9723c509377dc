"""The controller configuration derived from the command-line settings."""

from __future__ import annotations

import pytest

from imexdra.api.featuregates import resolve_feature_gates
from imexdra.api.flags.common import ImexIsolation, ImexMode, ImexSettings
from imexdra.api.imexmode import DRIVER_MANAGED_IMEX, HOST_MANAGED_IMEX, ImexManagement
from imexdra.common.errors import ConfigError
from imexdra.controller.config import ControllerConfig
from tests.unit.controller.support import controller_settings, make_config


def test_managed_namespaces_start_with_the_driver_namespace_without_duplicates() -> None:
    """The driver namespace comes first and additional namespaces are de-duplicated."""
    config = make_config(namespace="drv", additional_namespaces=("old", "drv", "old", "other"))
    assert config.managed_namespaces == ("drv", "old", "other")


@pytest.mark.parametrize(
    ("gates", "imex", "cliques"),
    [
        ("", DRIVER_MANAGED_IMEX, True),
        ("ComputeDomainCliques=false", DRIVER_MANAGED_IMEX, False),
        ("HostManagedIMEX=true", HOST_MANAGED_IMEX, False),
        ("HostManagedIMEXDaemon=true", HOST_MANAGED_IMEX, False),
    ],
    ids=["defaults", "cliques-off", "host-managed", "upstream-gate-name"],
)
def test_mode_and_cliques_follow_the_gates(gates: str, imex: ImexManagement, cliques: bool) -> None:
    """HostManagedIMEX selects host mode and turns clique publishing off."""
    config = make_config(gates=gates)
    assert config.imex_mode == imex
    assert config.cliques_enabled is cliques


def test_host_managed_mode_flag_without_the_gate_is_rejected() -> None:
    """--imex-mode=hostManaged without the HostManagedIMEX gate is a configuration error."""
    with pytest.raises(ConfigError, match="HostManagedIMEX"):
        ControllerConfig.from_settings(
            namespace="drv",
            controller=controller_settings(),
            imex=ImexSettings(imex_mode=ImexMode.HOST_MANAGED, imex_isolation=ImexIsolation.DOMAIN),
            feature_gates=resolve_feature_gates(""),
        )


def test_channel_isolation_is_refused_with_driver_managed_imex() -> None:
    """The controller refuses channel isolation with driver-managed IMEX, saying why."""
    with pytest.raises(ConfigError, match="needs host-managed IMEX"):
        ControllerConfig.from_settings(
            namespace="drv",
            controller=controller_settings(),
            imex=ImexSettings(imex_mode=ImexMode.DRIVER_MANAGED, imex_isolation=ImexIsolation.CHANNEL),
            feature_gates=resolve_feature_gates(""),
        )


def test_channel_isolation_with_host_managed_imex() -> None:
    """Under HostManagedIMEX the controller runs with channel isolation."""
    config = ControllerConfig.from_settings(
        namespace="drv",
        controller=controller_settings(),
        imex=ImexSettings(imex_mode=ImexMode.DRIVER_MANAGED, imex_isolation=ImexIsolation.CHANNEL),
        feature_gates=resolve_feature_gates("HostManagedIMEX=true"),
    )
    assert config.imex_isolation is ImexIsolation.CHANNEL


def test_channel_count_is_passed_on() -> None:
    """--imex-channel-count reaches the controller configuration (the channel pool's size)."""
    config = ControllerConfig.from_settings(
        namespace="drv",
        controller=controller_settings(),
        imex=ImexSettings(
            imex_mode=ImexMode.DRIVER_MANAGED, imex_isolation=ImexIsolation.DOMAIN, imex_channel_count=17
        ),
        feature_gates=resolve_feature_gates(""),
    )
    assert config.imex_channel_count == 17
    assert make_config().imex_channel_count == 2048


def test_domain_isolation_is_the_default() -> None:
    """Without IMEX_ISOLATION the controller runs domain isolation, in both modes."""
    assert make_config().imex_isolation is ImexIsolation.DOMAIN
    assert make_config(gates="HostManagedIMEX=true").imex_isolation is ImexIsolation.DOMAIN


@pytest.mark.parametrize(
    ("protection", "isolation", "gates", "reads_claims"),
    [
        (True, ImexIsolation.DOMAIN, "", True),
        (False, ImexIsolation.DOMAIN, "", False),
        (False, ImexIsolation.CHANNEL, "HostManagedIMEX=true", True),
    ],
    ids=["protection-default", "protection-off", "channel-isolation-protection-off"],
)
def test_claims_are_watched_for_protection_or_channel_isolation(
    protection: bool, isolation: ImexIsolation, gates: str, reads_claims: bool
) -> None:
    """--compute-domain-in-use-protection reaches the config; claims are read for it or for channels."""
    config = ControllerConfig.from_settings(
        namespace="drv",
        controller=controller_settings(compute_domain_in_use_protection=protection),
        imex=ImexSettings(imex_mode=ImexMode.DRIVER_MANAGED, imex_isolation=isolation),
        feature_gates=resolve_feature_gates(gates),
    )
    assert config.in_use_protection is protection
    assert config.reads_claims is reads_claims


def test_namespace_bound_is_passed_on() -> None:
    """--max-compute-domains-per-namespace reaches the configuration; unset it is 0 (no bound)."""
    assert make_config().max_compute_domains_per_namespace == 0
    assert make_config(max_compute_domains_per_namespace=4).max_compute_domains_per_namespace == 4
