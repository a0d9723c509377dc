"""Kubeconfig parsing (common.kube.kubeconfig) and the TLS context built on it (common.kube.client).

Aspects covered: a context's cluster, user and namespace with the kubeconfig's field names; relative
paths against the file's directory; the errors of a missing file, context, cluster or user; the
in-cluster service account (IPv6 host included); TLS from a CA file or data, insecure-skip-tls-verify,
and a client certificate from files or data.
"""

from __future__ import annotations

import base64
import ssl
from pathlib import Path

import pytest
import yaml

from imexdra.common.errors import ConfigError
from imexdra.common.kube.client import tls_context
from imexdra.common.kube.kubeconfig import Cluster, Context, Kubeconfig, SingleConfig, User, service_account
from imexdra_sim.localcluster.pki import ClusterPKI


def write(path: Path, **extra: object) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "c", "cluster": {"server": "https://api:6443", "certificate-authority": "ca.crt"}},
            {"name": "p", "cluster": {"server": "https://other", "proxy-url": "socks5://proxy:1080"}},
        ],
        "users": [
            {
                "name": "u",
                "user": {
                    "tokenFile": "token",
                    "client-certificate-data": "Y2VydA==",
                    "exec": {
                        "apiVersion": "client.authentication.k8s.io/v1",
                        "command": "kubelogin",
                        "args": ["get-token"],
                        "env": [{"name": "TEAM", "value": "a"}],
                    },
                    "auth-provider": {"name": "oidc", "config": {"id-token": "t"}},
                },
            }
        ],
        "contexts": [
            {"name": "dev", "context": {"cluster": "c", "user": "u", "namespace": "team"}},
            {"name": "anon", "context": {"cluster": "p"}},
        ],
        "current-context": "dev",
        **extra,
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def test_the_current_context_with_the_kubeconfig_s_field_names(tmp_path: Path) -> None:
    config = Kubeconfig.from_file(write(tmp_path / "kubeconfig")).get()
    assert (config.context_name, config.namespace, config.fname) == ("dev", "team", tmp_path / "kubeconfig")
    assert config.cluster.server == "https://api:6443" and config.cluster.certificate_auth == "ca.crt"
    user = config.user
    assert user is not None and user.token_file == "token" and user.client_cert_data == "Y2VydA=="
    assert user.exec is not None and user.exec.command == "kubelogin" and user.exec.args == ["get-token"]
    assert [(var.name, var.value) for var in user.exec.env or ()] == [("TEAM", "a")]
    assert user.auth_provider == {"name": "oidc", "config": {"id-token": "t"}}
    assert config.abs_file("token") == str(tmp_path / "token")
    assert config.abs_file("/etc/ca.crt") == "/etc/ca.crt"


def test_another_context_its_proxy_and_no_user(tmp_path: Path) -> None:
    config = Kubeconfig.from_file(write(tmp_path / "kubeconfig")).get("anon")
    assert config.user is None and config.namespace == "default"
    assert config.cluster.proxy_url == "socks5://proxy:1080"


@pytest.mark.parametrize(
    ("extra", "context", "message"),
    [
        ({"current-context": None}, None, "kubeconfig: No current context set"),
        ({}, "prod", "kubeconfig: Context 'prod' not found"),
        ({"contexts": [{"name": "x", "context": {"cluster": "gone"}}]}, "x", "names cluster 'gone'"),
        (
            {"contexts": [{"name": "x", "context": {"cluster": "c", "user": "gone"}}]},
            "x",
            "names user 'gone'",
        ),
        ({"clusters": "not a list"}, None, "kubeconfig: kubeconfig "),
    ],
    ids=["no-current-context", "unknown-context", "unknown-cluster", "unknown-user", "malformed"],
)
def test_what_cannot_be_selected_is_a_config_error(
    tmp_path: Path, extra: dict[str, object], context: str | None, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        Kubeconfig.from_file(write(tmp_path / "kubeconfig", **extra)).get(context)


def test_a_missing_file_and_a_relative_path_without_a_file() -> None:
    with pytest.raises(ConfigError, match="kubeconfig: Configuration file /nonexistent/kc not found"):
        Kubeconfig.from_file(Path("/nonexistent/kc"))
    config = SingleConfig(context_name="x", context=Context(cluster="c"), cluster=Cluster())
    with pytest.raises(ConfigError, match="token is relative, but kubeconfig path unknown"):
        config.abs_file("token")


@pytest.mark.parametrize(
    ("host", "server"), [("10.0.0.1", "https://10.0.0.1:443"), ("fd00::1", "https://[fd00::1]:443")]
)
def test_the_in_cluster_service_account(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, host: str, server: str
) -> None:
    (tmp_path / "token").write_text("sa-token")
    (tmp_path / "namespace").write_text("driver")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    config = service_account(tmp_path)
    assert config.cluster == Cluster(server=server, certificate_auth=str(tmp_path / "ca.crt"))
    assert config.user == User(token="sa-token", token_file=str(tmp_path / "token"))
    assert config.namespace == "driver" and config.fname is None
    (tmp_path / "namespace").unlink()
    with pytest.raises(ConfigError, match=r"kubeconfig: .*namespace"):
        service_account(tmp_path)


def test_outside_a_pod_the_in_cluster_config_says_what_would_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mounted service account without the kubelet's service variables is a ConfigError naming
    --kubeconfig, not a KeyError."""
    (tmp_path / "token").write_text("sa-token")
    (tmp_path / "namespace").write_text("driver")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    with pytest.raises(ConfigError, match=r"KUBERNETES_SERVICE_HOST .* pass --kubeconfig or set KUBECONFIG"):
        service_account(tmp_path)


def _config(tmp_path: Path, cluster: Cluster, user: User | None = None) -> SingleConfig:
    return SingleConfig(
        context_name="x", context=Context(cluster="c"), cluster=cluster, user=user, fname=tmp_path / "kc"
    )


def test_tls_from_the_cluster_s_ca_and_the_user_s_certificate(tmp_path: Path) -> None:
    """The CA (a file relative to the kubeconfig, or data) is the only trust; a client certificate
    loads from files or data; plain HTTP has no TLS; insecure-skip-tls-verify verifies nothing."""
    pki = ClusterPKI(tmp_path)
    pair = pki.issue("user", common_name="user")
    ca_data = base64.b64encode((tmp_path / "ca.crt").read_bytes()).decode()
    from_file = tls_context(_config(tmp_path, Cluster(server="https://api", certificate_auth="ca.crt")))
    from_data = tls_context(_config(tmp_path, Cluster(server="https://api", certificate_auth_data=ca_data)))
    for context in (from_file, from_data):
        assert context is not None and context.verify_mode is ssl.CERT_REQUIRED
        assert len(context.get_ca_certs()) == 1
    insecure = tls_context(_config(tmp_path, Cluster(server="https://api", insecure=True)))
    assert insecure is not None and insecure.verify_mode is ssl.CERT_NONE and not insecure.check_hostname
    assert tls_context(_config(tmp_path, Cluster(server="http://api"))) is None
    as_files = User(client_cert=str(pair.cert), client_key=str(pair.key))
    as_data = User(
        client_cert_data=base64.b64encode(pair.cert.read_bytes()).decode(),
        client_key_data=base64.b64encode(pair.key.read_bytes()).decode(),
    )
    for user in (as_files, as_data):
        assert tls_context(_config(tmp_path, Cluster(server="https://api", certificate_auth="ca.crt"), user))
    broken = User(client_cert_data=as_data.client_cert_data, client_key_data=ca_data)
    with pytest.raises(ssl.SSLError):
        tls_context(_config(tmp_path, Cluster(server="https://api", certificate_auth="ca.crt"), broken))
