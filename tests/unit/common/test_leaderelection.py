"""Leader election settings and identities (the election itself runs against the real API server)."""

import re

import pytest

from imexdra.common.errors import ConfigError
from imexdra.common.machinery.leaderelection import LeaderElectionConfig, new_identity


def test_defaults_are_client_go_defaults() -> None:
    """Lease duration, renew deadline and retry period default to 15 s, 10 s and 2 s."""
    config = LeaderElectionConfig(name="lock", namespace="ns", identity="me")
    assert (config.lease_duration, config.renew_deadline, config.retry_period) == (15.0, 10.0, 2.0)


@pytest.mark.parametrize(
    ("lease", "renew", "retry"),
    [(10, 10, 2), (15, 10, 10), (15, 10, 0), (0.9, 0.5, 0.1)],
    ids=["renew-equals-lease", "retry-equals-renew", "zero-retry", "sub-second-lease"],
)
def test_inconsistent_timings_are_rejected(lease: float, renew: float, retry: float) -> None:
    """Timings must satisfy lease > renew deadline > retry period > 0, with a lease of at least 1 s."""
    with pytest.raises(ConfigError, match="lease"):
        LeaderElectionConfig(
            name="lock",
            namespace="ns",
            identity="me",
            lease_duration=lease,
            renew_deadline=renew,
            retry_period=retry,
        )


def test_identity_is_pod_name_plus_fresh_uuid() -> None:
    """Identities follow upstream's <pod>-<uuid4> and differ per process start."""
    first, second = new_identity("ctrl-0"), new_identity("ctrl-0")
    assert re.fullmatch(r"ctrl-0-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}", first)
    assert first != second
