"""The containerd cluster's control-plane node and CoreDNS manifests, without a running cluster."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from imexdra_sim.localcluster import cluster, dns
from imexdra_sim.localcluster.nodes import NodeSpec, new_node
from imexdra_sim.localcluster.processes import ClusterStartError
from tests.support.paths import REPO


def _versions() -> dict[str, str]:
    lines = (REPO / "tools/k8s/versions.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


def test_coredns_image_is_the_one_the_image_build_makes() -> None:
    """The Deployment names the image tools/image/build.sh packs (COREDNS_VERSION in versions.env)."""
    assert f"registry.k8s.io/coredns/coredns:v{_versions()['COREDNS_VERSION']}" == dns.COREDNS_IMAGE


def test_dns_service_address_is_inside_the_service_cidr() -> None:
    """The apiserver only accepts a Service ClusterIP from its own range."""
    assert ipaddress.ip_address(dns.CLUSTER_DNS_IP) in ipaddress.ip_network(cluster.SERVICE_CIDR)
    [service] = [m for m in dns.manifests() if m["kind"] == "Service"]
    assert service["spec"]["clusterIP"] == dns.CLUSTER_DNS_IP
    assert {p["name"] for p in service["spec"]["ports"]} == {"dns", "dns-tcp", "metrics"}


def test_coredns_runs_on_the_tainted_control_plane_and_reads_the_mounted_corefile() -> None:
    """Pinned to the control-plane role, tolerating its taint, the Corefile from the ConfigMap."""
    [deployment] = [m for m in dns.manifests() if m["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {dns.CONTROL_PLANE_ROLE: ""}
    assert {"key": dns.CONTROL_PLANE_ROLE, "effect": "NoSchedule"} in pod["tolerations"]
    [container] = pod["containers"]
    assert container["args"] == ["-conf", "/etc/coredns/Corefile"]
    [config] = [m for m in dns.manifests() if m["kind"] == "ConfigMap"]
    assert f"kubernetes {dns.CLUSTER_DOMAIN} in-addr.arpa ip6.arpa" in config["data"]["Corefile"]
    # No upstream resolver is reachable from the pod network: forwarding would only time out.
    assert "forward" not in config["data"]["Corefile"]


def test_containerd_kubelets_point_pods_at_cluster_dns(tmp_path: Path) -> None:
    """containerd nodes get clusterDNS/clusterDomain; fakecri's host-process pods do not need them."""
    containerd_node = new_node(NodeSpec(name="n0", runtime="containerd"), tmp_path)
    config = containerd_node.kubelet_config("10.200.0.2")
    assert (config["clusterDNS"], config["clusterDomain"]) == ([dns.CLUSTER_DNS_IP], dns.CLUSTER_DOMAIN)
    fakecri_node = new_node(NodeSpec(name="n1", pod_cidr="127.100.1.0/24"), tmp_path)
    assert "clusterDNS" not in fakecri_node.kubelet_config("192.0.2.1")


def test_control_plane_spec_registers_with_the_noschedule_taint(tmp_path: Path) -> None:
    """The kubelet registers the control-plane node tainted, so GPU workloads never land there."""
    node = new_node(cluster.control_plane_spec(), tmp_path)
    assert node.spec.runtime == "containerd"
    assert node.kubelet_config("10.200.0.2")["registerWithTaints"] == [
        {"key": dns.CONTROL_PLANE_ROLE, "effect": "NoSchedule"}
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a/b:NoExecute", {"key": "a/b", "effect": "NoExecute"}),
        (
            "nvidia.com/gpu=present:NoSchedule",
            {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
        ),
    ],
)
def test_taints_parse_key_value_and_effect(tmp_path: Path, text: str, expected: dict[str, str]) -> None:
    """``key[=value]:Effect`` becomes the KubeletConfiguration's taint object."""
    node = new_node(NodeSpec(name="n", taints=(text,)), tmp_path)
    assert node.kubelet_config("192.0.2.1")["registerWithTaints"] == [expected]


@pytest.mark.parametrize("text", ["no-effect", "k:Sometimes", ":NoSchedule"])
def test_bad_taint_is_refused_with_the_expected_form(tmp_path: Path, text: str) -> None:
    """A malformed taint fails the node's start with the form that works."""
    node = new_node(NodeSpec(name="n", taints=(text,)), tmp_path)
    with pytest.raises(ClusterStartError, match=r"key\[=value\]:NoSchedule"):
        node.kubelet_config("192.0.2.1")
