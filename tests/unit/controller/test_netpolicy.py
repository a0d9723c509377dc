"""The daemons' NetworkPolicy as rendered (docs/tenancy.md, "Network"); created over a real API server in
tests/integration/test_controller_driver_managed.py, enforced in tests/e2e/test_network_policy.py."""

from __future__ import annotations

import pytest

from imexdra.common.kube.models.meta_v1 import ObjectMeta
from imexdra.controller.caches import DaemonSetMeta
from imexdra.controller.netpolicy import daemon_network_policy
from tests.unit.controller.support import UID, make_config

DAEMON_SET = f"computedomain-daemon-{UID}"
LABELS = {"resource.nvidia.com/computeDomain": UID}


def daemon_set(uid: str | None = "ds-uid-1") -> DaemonSetMeta:
    return DaemonSetMeta(metadata=ObjectMeta(name=DAEMON_SET, namespace="nvidia-dra", uid=uid, labels=LABELS))


def test_policy_admits_the_domains_daemons_on_the_imex_ports_only() -> None:
    """Beside and owned by the DaemonSet; selects its daemons; ingress from the same label on 50000/50005."""
    policy = daemon_network_policy(UID, daemon_set())
    assert policy.to_dict() == {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": DAEMON_SET,
            "namespace": "nvidia-dra",
            "labels": LABELS,
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "DaemonSet",
                    "name": DAEMON_SET,
                    "uid": "ds-uid-1",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "podSelector": {"matchLabels": LABELS},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "from": [{"podSelector": {"matchLabels": LABELS}}],
                    "ports": [{"protocol": "TCP", "port": 50000}, {"protocol": "TCP", "port": 50005}],
                }
            ],
        },
    }


def test_a_daemonset_not_created_yet_owns_nothing() -> None:
    """Without the DaemonSet's UID there is no owner to name: rendering refuses."""
    with pytest.raises(ValueError, match="UID"):
        daemon_network_policy(UID, daemon_set(uid=None))


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [({}, True), ({"compute_domain_daemon_network_policy": False}, False)],
    ids=["default-on", "switched-off"],
)
def test_the_option_decides_whether_the_controller_makes_policies(
    overrides: dict[str, object], expected: bool
) -> None:
    """``--compute-domain-daemon-network-policy`` defaults to on; off, the controller makes none."""
    assert make_config(**overrides).writes_network_policies is expected
