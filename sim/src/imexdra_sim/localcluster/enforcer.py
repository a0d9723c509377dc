"""The NetworkPolicy enforcer of containerd clusters that ask for one: kube-router's firewall per node.

A cluster made with ``LocalCluster(network_policy=True)`` runs, on every containerd node, kube-router's
network policy controller (``kube-router-netpol``, built by tools/k8s/build.sh from kube-router's Go
module) in the node's network namespace and cgroup, as kube-router's DaemonSet runs one per node on a
real cluster (docs/node-runtime.md §10). It turns NetworkPolicies into iptables rules and ipsets of that
namespace only: pods selected by a policy are reachable only as the policy says, every other pod as
before. Clusters without the option (the rest of the suite) run no enforcer and pay nothing for it.

It starts once its node is Ready: kube-router reads its Node object (the node's address tells it which
pods are local) and exits when there is none yet.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from imexdra_sim.localcluster.binaries import Binaries
from imexdra_sim.localcluster.nodes import Node
from imexdra_sim.localcluster.processes import ClusterStartError, ManagedProcess, Supervisor

BINARY = "kube-router-netpol"
BINARIES = (BINARY, "ipset")
"""What the enforcer runs besides the iptables wrappers every containerd cluster has."""
USER = "system:kube-router"
"""The enforcer's identity (a client certificate); bound by ``rbac_manifests``."""
_ROLE = "imexdra-sim:kube-router-netpol"


def rbac_manifests() -> list[dict[str, Any]]:
    """Read access to what kube-router's network policy controller watches (upstream's ClusterRole, trimmed).

    Pods, namespaces and NetworkPolicies through informers; its own Node once, by name.
    """
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": _ROLE},
            "rules": [
                {"apiGroups": [""], "resources": ["pods", "namespaces"], "verbs": ["list", "watch"]},
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
                {
                    "apiGroups": ["networking.k8s.io"],
                    "resources": ["networkpolicies"],
                    "verbs": ["list", "watch"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": _ROLE},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": _ROLE},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": USER}],
        },
    ]


def start_enforcer(
    node: Node, *, binaries: Binaries, supervisor: Supervisor, kubeconfig: Path, service_cidr: str
) -> ManagedProcess:
    """Start the enforcer of a running containerd ``node``, in the node's network namespace and cgroup."""
    runtime = next((p for p in node.processes if p.name == f"{node.name}-containerd"), None)
    if runtime is None or node.cgroup is None:
        raise ClusterStartError(f"node {node.name}: a NetworkPolicy enforcer runs on containerd nodes only")
    process = supervisor.start(
        f"{node.name}-kube-router-netpol",
        [
            *node.cgroup.enter_argv(),
            "nsenter",
            f"--net=/proc/{runtime.popen.pid}/ns/net",
            "--",
            str(binaries.path(BINARY)),
            f"--kubeconfig={kubeconfig}",
            f"--hostname-override={node.name}",
            # kube-router's flags for its firewall alone; the build has nothing else (tools/k8s/kuberouter).
            "--run-firewall=true",
            "--run-router=false",
            "--run-service-proxy=false",
            f"--service-cluster-ip-range={service_cidr}",
            # No health server: it would listen on every address of the node, pods' gateway included.
            "--health-port=0",
            "--v=1",
        ],
        # kube-router runs iptables, iptables-save/-restore and ipset from PATH (tools/k8s/build.sh).
        env={"PATH": binaries.search_path()},
    )
    node.processes.append(process)  # a node process: it goes when the node goes
    return process


def in_node_netns(node: Node, binaries: Binaries, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run one of the cluster's network tools (``iptables``, ...) inside a containerd node's namespace."""
    runtime = next((p for p in node.processes if p.name == f"{node.name}-containerd"), None)
    if runtime is None:
        raise ClusterStartError(f"node {node.name} has no network namespace of its own")
    return subprocess.run(
        ["nsenter", f"--net=/proc/{runtime.popen.pid}/ns/net", "--", str(binaries.path(argv[0])), *argv[1:]],
        capture_output=True,
        text=True,
        check=False,
    )


def enforcing(node: Node, binaries: Binaries) -> bool:
    """Whether the node's enforcer has hooked its chains into the filter table (it then enforces)."""
    return (
        in_node_netns(node, binaries, "iptables", "-t", "filter", "-S", "KUBE-ROUTER-FORWARD").returncode == 0
    )


def filter_rules(node: Node, binaries: Binaries) -> str:
    """The node's filter table with packet counters (``iptables-save -c``): what the enforcer made of it."""
    result = in_node_netns(node, binaries, "iptables-save", "-c", "-t", "filter")
    if result.returncode != 0:
        raise ClusterStartError(f"iptables-save on {node.name} failed: {result.stderr.strip()}")
    return result.stdout
