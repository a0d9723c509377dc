"""The e2e tier's racks, one configuration each (the fixtures in ``conftest.py`` bring them up).

Tests that need a rack's parameters (a grace period, say) import them from here, never from a conftest.
"""

from __future__ import annotations

from imexdra_sim import rack, seedworkloads
from tests.support.upstream import UPSTREAM_VALUES_FILE

HOST_MANAGED = rack.RackConfig(nodes=3, host_managed=True, no_fabric_nodes=(2,))
#: Every key of upstream's chart values at its default (docs/compatibility.md): the driver-managed rack
#: installs with it underneath the rack's own values, as an operator moving from upstream would.
DRIVER_MANAGED = rack.RackConfig(nodes=2, values_files=(UPSTREAM_VALUES_FILE,))
#: Installed as an operator installs: the OCI chart from the cluster's registry, nodes pulling the image,
#: and a NetworkPolicy enforcer (kube-router's firewall) on every node, so the chart's policies hold
#: (docs/tenancy.md). The real-nodes and the network-policy modules share it (docs/testing.md).
REAL_NODES = rack.RackConfig(nodes=2, runtime="containerd", from_registry=True, network_policy=True)
NETWORK_POLICY = REAL_NODES
#: The upgrade test's rack (tests/e2e/test_upgrade.py): installed from an earlier release's OCI chart.
UPGRADE = rack.RackConfig(nodes=2, runtime="containerd", from_registry=True)
#: The seeds' workloads on a full NVL72 rack: 18 trays, each a containerd node with its own cgroups
#: (docs/node-runtime.md §9 says why that made 18 fit on the 2-core CI machine).
SEED_RACK = rack.RackConfig(nodes=seedworkloads.RACK_WORKERS, runtime="containerd")
#: Workload pods bound only to a Ready IMEX daemon (our gate, docs/binding-conditions.md).
BINDING_CONDITIONS = rack.RackConfig(
    nodes=2, extra_values={"featureGates": {"ComputeDomainBindingConditions": True}}
)
CHANNEL_ISOLATION = rack.RackConfig(
    nodes=4,
    host_managed=True,
    extra_values={"resources": {"computeDomains": {"imex": {"isolation": "channel"}}}},
)
#: Kubelets silent this long get their node marked Unknown (kube-controller-manager's default is 50 s).
NODE_LOSS_GRACE_SECONDS = 20
NODE_LOSS = rack.RackConfig(nodes=4, node_monitor_grace_seconds=NODE_LOSS_GRACE_SECONDS)
HOST_MANAGED_NODE_LOSS = rack.RackConfig(
    nodes=3, host_managed=True, node_monitor_grace_seconds=NODE_LOSS_GRACE_SECONDS
)
LEADER_ELECTION = rack.RackConfig(nodes=2, extra_values={"controller": {"replicas": 2}})
QUIET = rack.RackConfig(nodes=2, extra_values={"logVerbosity": "0"})
