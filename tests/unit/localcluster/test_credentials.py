"""ServiceAccount kubeconfigs without a running cluster: the token request and the file written.

The API server side (the token authenticates, a bound token names its node) is covered by
tests/integration/test_chart_rbac.py.
"""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from imexdra_sim.localcluster.binaries import Binaries
from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.localcluster.credentials import (
    BoundObject,
    service_account_kubeconfig,
    service_account_token,
)
from imexdra_sim.localcluster.pki import ClusterPKI


class TokenKubectl:
    """Records kubectl calls and answers ``create token`` with a fixed token."""

    def __init__(self, answer: str = "eyJhbGciOi.payload.signature") -> None:
        self.calls: list[tuple[str, ...]] = []
        self.answer = answer

    def __call__(self, *args: str, **_: object) -> subprocess.CompletedProcess[str]:
        self.calls.append(args)
        return subprocess.CompletedProcess(["kubectl", *args], 0, stdout=self.answer + "\n", stderr="")


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LocalCluster:
    """A LocalCluster that was never started, with a PKI, a URL and a recording kubectl."""
    local = LocalCluster(run_dir=tmp_path, binaries=Binaries(tmp_path / "bin"))
    local.pki = ClusterPKI(tmp_path / "pki")
    local.apiserver_url = "https://127.0.0.1:6443"
    monkeypatch.setattr(local, "kubectl", TokenKubectl())
    return local


@pytest.mark.parametrize(
    ("bound_to", "flags", "file_name"),
    [
        pytest.param(None, [], "sa-ns-acct.kubeconfig", id="unbound"),
        pytest.param(
            BoundObject("Node", "node-0"),
            ["--bound-object-kind=Node", "--bound-object-name=node-0"],
            "sa-ns-acct-node-node-0.kubeconfig",
            id="node",
        ),
        pytest.param(
            BoundObject("Pod", "daemon-x"),
            ["--bound-object-kind=Pod", "--bound-object-name=daemon-x"],
            "sa-ns-acct-pod-daemon-x.kubeconfig",
            id="pod",
        ),
    ],
)
def test_kubeconfig_carries_the_token_ca_and_server(
    cluster: LocalCluster, bound_to: BoundObject | None, flags: list[str], file_name: str
) -> None:
    """The token is requested for the account (and bound object) and written with the cluster's CA."""
    path = service_account_kubeconfig(cluster, "ns", "acct", bound_to=bound_to)
    kubectl = cluster.kubectl
    assert isinstance(kubectl, TokenKubectl)
    assert kubectl.calls == [("create", "token", "acct", "-n", "ns", "--duration=3600s", *flags)]
    assert cluster.run_dir is not None and path == cluster.run_dir / file_name
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    config = yaml.safe_load(path.read_text())
    (entry,) = config["clusters"]
    assert entry["cluster"] == {
        "server": "https://127.0.0.1:6443",
        "certificate-authority": str(cluster.pki.ca.cert),
    }
    (user,) = config["users"]
    assert user == {"name": "system:serviceaccount:ns:acct", "user": {"token": kubectl.answer}}
    (context,) = config["contexts"]
    assert context["context"] == {"cluster": "local", "user": user["name"], "namespace": "ns"}
    assert config["current-context"] == context["name"]


def test_explicit_path_and_duration(cluster: LocalCluster, tmp_path: Path) -> None:
    """``path=`` and ``duration_seconds=`` are honoured."""
    target = tmp_path / "elsewhere.kubeconfig"
    assert service_account_kubeconfig(cluster, "ns", "acct", path=target, duration_seconds=7200) == target
    kubectl = cluster.kubectl
    assert isinstance(kubectl, TokenKubectl)
    assert "--duration=7200s" in kubectl.calls[0]


def test_short_lifetimes_are_refused(cluster: LocalCluster) -> None:
    """The API server's minimum token lifetime is 10 minutes; asking for less is a caller error."""
    with pytest.raises(ValueError, match="at least 600 seconds"):
        service_account_token(cluster, "ns", "acct", duration_seconds=60)


def test_output_that_is_not_a_token_is_an_error(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kubectl answer that is not a bare token (e.g. a warning) is not written into a kubeconfig."""
    monkeypatch.setattr(cluster, "kubectl", TokenKubectl(answer="Warning: something\ntoken"))
    with pytest.raises(ValueError, match="returned no token"):
        service_account_token(cluster, "ns", "acct")
