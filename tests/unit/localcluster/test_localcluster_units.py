"""Pieces of the local cluster harness that need no running cluster."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography import x509

from imexdra.common.errors import ConfigError
from imexdra_sim.localcluster import binaries
from imexdra_sim.localcluster.nodes import NodeSpec, new_node
from imexdra_sim.localcluster.pki import ClusterPKI


def test_missing_binaries_explain_how_to_build(tmp_path: Path) -> None:
    """An empty bin dir gives a ConfigError naming the missing binaries and `make k8s`."""
    with pytest.raises(ConfigError, match=r"kube-apiserver.*make k8s"):
        binaries.locate(tmp_path)


def test_missing_nvml_mock_explains_how_to_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the mock libnvidia-ml.so.1 in the cache, the ConfigError names its path and `make k8s`."""
    monkeypatch.setenv("IMEXDRA_CACHE", str(tmp_path))
    with pytest.raises(ConfigError, match=r"nvml-mock/libnvidia-ml\.so\.1; run `make k8s`"):
        binaries.nvml_mock_library()


def test_pki_issues_node_identity_signed_by_ca(tmp_path: Path) -> None:
    """A kubelet client cert carries system:node:<name> in system:nodes and chains to the CA."""
    pki = ClusterPKI(tmp_path)
    pair = pki.issue("kubelet-n1", common_name="system:node:n1", organizations=("system:nodes",))
    cert = x509.load_pem_x509_certificate(pair.cert.read_bytes())
    ca = x509.load_pem_x509_certificate(pki.ca.cert.read_bytes())
    cert.verify_directly_issued_by(ca)
    subject = {attr.oid._name: attr.value for attr in cert.subject}
    assert subject == {"commonName": "system:node:n1", "organizationName": "system:nodes"}
    assert pair.key.stat().st_mode & 0o777 == 0o600


def test_kubelet_config_fits_cgroup_v1_vm(tmp_path: Path) -> None:
    """The kubelet config allows cgroup v1, runs on the node's fakecri and binds the node IP."""
    node = new_node(NodeSpec(name="n1"), tmp_path)
    config = node.kubelet_config("192.0.2.2")
    assert config["failCgroupV1"] is False
    assert config["cgroupsPerQOS"] is False and config["enforceNodeAllocatable"] == []
    assert config["containerRuntimeEndpoint"] == f"unix://{tmp_path / 'n1' / 'cri.sock'}"
    assert config["address"] == "192.0.2.2"
    assert node.kubelet_port != node.healthz_port
