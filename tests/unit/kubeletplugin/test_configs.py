"""Opaque config decoding and the config-to-result precedence rules (docs/data-path.md §7.2)."""

from typing import Any

import pytest

from imexdra.api.opaque import ComputeDomainChannelConfig, ComputeDomainDaemonConfig
from imexdra.common.errors import ConfigError, RetryableError, is_permanent
from imexdra.kubeletplugin.configs.claim import (
    DEFAULT_CHANNEL_CONFIG,
    DEFAULT_DAEMON_CONFIG,
    allocation_results,
    config_groups,
    non_admin_devices,
    opaque_device_configs,
)
from imexdra.kubeletplugin.slices import allocatable_devices
from tests.unit.kubeletplugin.support import (
    DOMAIN_UID,
    OTHER_DOMAIN_UID,
    channel_params,
    config,
    daemon_params,
    result,
    status,
    typed,
)

ALLOCATABLE = allocatable_devices()
CLASS_CHANNEL = config(channel_params(OTHER_DOMAIN_UID), requests=["channel"], source="FromClass")
CLAIM_CHANNEL = config(channel_params(DOMAIN_UID), requests=["channel"])


def groups_of(st: dict[str, Any]) -> list[tuple[object, list[str]]]:
    return [
        (g.config, [r.request for r in g.results]) for g in config_groups(typed(st), ALLOCATABLE, strict=True)
    ]


def chan(domain: str, mode: str = "Single") -> ComputeDomainChannelConfig:
    return ComputeDomainChannelConfig(domain_id=domain, allocation_mode=mode)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("configs", "expected"),
    [
        ([], [(DEFAULT_DAEMON_CONFIG, ["daemon"]), (DEFAULT_CHANNEL_CONFIG, ["channel"])]),
        (
            [CLASS_CHANNEL, CLAIM_CHANNEL],
            [(DEFAULT_DAEMON_CONFIG, ["daemon"]), (chan(DOMAIN_UID), ["channel"])],
        ),
        (
            [CLAIM_CHANNEL, CLASS_CHANNEL],  # order in the list does not matter: claim beats class
            [(DEFAULT_DAEMON_CONFIG, ["daemon"]), (chan(DOMAIN_UID), ["channel"])],
        ),
        ([CLASS_CHANNEL], [(DEFAULT_DAEMON_CONFIG, ["daemon"]), (chan(OTHER_DOMAIN_UID), ["channel"])]),
        (
            [config(channel_params(DOMAIN_UID))],  # untargeted: applies to channels, skipped for daemons
            [(DEFAULT_DAEMON_CONFIG, ["daemon"]), (chan(DOMAIN_UID), ["channel"])],
        ),
        (
            [config(channel_params(OTHER_DOMAIN_UID)), config(channel_params(DOMAIN_UID, "All"))],
            [(DEFAULT_DAEMON_CONFIG, ["daemon"]), (chan(DOMAIN_UID, "All"), ["channel"])],
        ),
        (
            [config(daemon_params(), requests=["daemon"]), CLAIM_CHANNEL],
            [(ComputeDomainDaemonConfig(domain_id=DOMAIN_UID), ["daemon"]), (chan(DOMAIN_UID), ["channel"])],
        ),
        (
            [config(channel_params(), driver="gpu.nvidia.com")],  # another driver's config is skipped
            [(DEFAULT_DAEMON_CONFIG, ["daemon"]), (DEFAULT_CHANNEL_CONFIG, ["channel"])],
        ),
    ],
    ids=[
        "defaults-only",
        "claim-beats-class",
        "claim-beats-class-any-order",
        "class-only",
        "untargeted-by-type",
        "later-wins",
        "each-kind-its-own",
        "other-driver-skipped",
    ],
)
def test_precedence(configs: list[dict[str, Any]], expected: list[tuple[object, list[str]]]) -> None:
    """Defaults lowest, class before claim, later wins, targeted beats untargeted; one group per config."""
    st = status([result("channel", "channel-0"), result("daemon", "daemon-0")], configs)
    assert groups_of(st) == expected


def test_results_of_other_drivers_are_ignored() -> None:
    """Only this driver's allocation results get a config group."""
    st = status(
        [result("gpu", "gpu-0", driver="gpu.nvidia.com"), result("channel", "channel-0")], [CLAIM_CHANNEL]
    )
    assert groups_of(st) == [(chan(DOMAIN_UID), ["channel"])]


def test_subrequest_matched_by_its_parent_request() -> None:
    """A config naming request ``channel`` applies to its subrequest ``channel/single``."""
    st = status([result("channel/single", "channel-0")], [CLAIM_CHANNEL])
    assert groups_of(st) == [(chan(DOMAIN_UID), ["channel/single"])]


def test_shared_config_groups_results_together() -> None:
    """Results whose requests one config names share that config's group."""
    st = status(
        [result("a", "channel-0"), result("b", "channel-1")],
        [config(channel_params(), requests=["a", "b"])],
    )
    assert groups_of(st) == [(chan(DOMAIN_UID), ["a", "b"])]


@pytest.mark.parametrize(
    ("st", "message"),
    [
        (
            status([result("channel", "channel-0")], [config(daemon_params(), requests=["channel"])]),
            "cannot apply ComputeDomainDaemonConfig to request: channel",
        ),
        (
            status([result("daemon", "daemon-0")], [config(channel_params(), requests=["daemon"])]),
            "cannot apply ComputeDomainChannelConfig to request: daemon",
        ),
        (status([result("channel", "channel-4096")]), "requested device is not allocatable: channel-4096"),
        (
            status([result("channel", "channel-0")], [{**CLAIM_CHANNEL, "source": "FromSomewhere"}]),
            "invalid config source: 'FromSomewhere'",
        ),
        (
            status([result("channel", "channel-0")], [{"source": "FromClaim", "requests": ["channel"]}]),
            "only opaque parameters are supported by this driver",
        ),
    ],
    ids=[
        "daemon-config-on-channel",
        "channel-config-on-daemon",
        "not-allocatable",
        "bad-source",
        "not-opaque",
    ],
)
def test_retryable_config_errors(st: dict[str, Any], message: str) -> None:
    """These mapping errors are retryable, with upstream's wording."""
    with pytest.raises(RetryableError, match="^" + message.replace("(", r"\(")):
        config_groups(typed(st), ALLOCATABLE, strict=True)


def test_strict_decoding_rejects_unknown_fields_permanently() -> None:
    """Prepare decodes strictly: an unknown field is a permanent error quoting Kubernetes' wording."""
    st = status(
        [result("channel", "channel-0")], [config(channel_params(unexpectedField=1), requests=["channel"])]
    )
    with pytest.raises(ConfigError) as caught:
        config_groups(typed(st), ALLOCATABLE, strict=True)
    assert is_permanent(caught.value)
    assert str(caught.value).startswith("error decoding config parameters: ")
    assert 'strict decoding error: unknown field "unexpectedField"' in str(caught.value)


def test_lenient_decoding_drops_unknown_fields() -> None:
    """Unprepare decodes leniently: checkpointed data from another version still maps."""
    st = status(
        [result("channel", "channel-0")], [config(channel_params(unexpectedField=1), requests=["channel"])]
    )
    assert [g.config for g in config_groups(typed(st), ALLOCATABLE, strict=False)] == [chan(DOMAIN_UID)]


def test_decoding_accepts_raw_json_parameters() -> None:
    """Parameters given as JSON text decode like parsed ones."""
    st = status(
        [result("channel", "channel-0")],
        [
            config(
                '{"apiVersion":"resource.nvidia.com/v1beta1","kind":"ComputeDomainChannelConfig","domainID":"x"}'
            )
        ],
    )
    assert [c.config for c in opaque_device_configs(typed(st), strict=True)] == [chan("x")]


def test_non_admin_devices() -> None:
    """Admin-access results and other drivers' devices are not held; a missing status holds nothing."""
    st = status(
        [
            result("a", "channel-0"),
            result("b", "daemon-0", admin=True),
            result("c", "channel-1", admin=False),
            result("d", "gpu-0", driver="gpu.nvidia.com"),
        ]
    )
    assert non_admin_devices(typed(st)) == {"channel-0", "channel-1"}
    assert non_admin_devices(typed(None)) == set()
    assert non_admin_devices(typed({})) == set()
    assert allocation_results(typed({"allocation": {}})) == []
