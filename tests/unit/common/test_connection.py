"""One connection per component: the proxy it resolves and the client it builds."""

from __future__ import annotations

import pathlib

import pytest

from imexdra.common.errors import ConfigError
from imexdra.common.kube.client import RetryableApiError
from imexdra.common.kube.connection import connect, make_client
from imexdra.common.kube.kubeclient import KubeClient
from imexdra.common.kube.kubeconfig import Cluster, Context, SingleConfig, User
from imexdra.common.kube.models.core_v1 import ConfigMap
from imexdra.common.kube.proxy import proxy_url

KUBECONFIG = """
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {{server: "{server}"{extra}}}
users:
- name: u
  user: {{token: t}}
contexts:
- name: x
  context: {{cluster: c, user: u}}
current-context: x
"""
PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy")


@pytest.fixture(autouse=True)
def no_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sets the proxy variables it needs."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def kubeconfig(tmp_path: pathlib.Path, server: str, extra: str = "") -> pathlib.Path:
    path = tmp_path / "kc"
    path.write_text(KUBECONFIG.format(server=server, extra=extra))
    return path


def config(server: str) -> SingleConfig:
    return SingleConfig(
        context_name="x", context=Context(cluster="c"), cluster=Cluster(server=server), user=User()
    )


async def test_make_client_is_the_typed_client_on_the_connection_s_proxy(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The typed client dials what the connection decided: with HTTPS_PROXY set, a loopback server
    directly (a refused connection, no proxy named), a kubeconfig proxy-url through that proxy."""
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    direct = make_client(field_manager="t", kubeconfig=kubeconfig(tmp_path, "http://127.0.0.1:1"))
    assert isinstance(direct, KubeClient)
    with pytest.raises(RetryableApiError, match=r"ConnectionRefused.*\('127\.0\.0\.1', 1\)"):
        await direct.get(ConfigMap, "a", namespace="ns")
    direct.close()
    path = kubeconfig(tmp_path, "http://127.0.0.1:1", ', proxy-url: "http://127.0.0.1:2"')
    proxied = make_client(field_manager="t", kubeconfig=path)
    with pytest.raises(RetryableApiError, match=r"ConnectionRefused.*\('127\.0\.0\.1', 2\)"):
        await proxied.get(ConfigMap, "a", namespace="ns")
    proxied.close()


def test_one_tls_context_for_both_clients_and_the_credentials(tmp_path: pathlib.Path) -> None:
    """An https connection has one TLS context, the one the transport and credentials are given."""
    connection = connect(kubeconfig(tmp_path, "https://127.0.0.1:6443"))
    assert connection.tls is not None
    assert connection.transport(user_agent="t")._ssl is connection.tls
    assert connection.credentials._tls is connection.tls
    assert connect(kubeconfig(tmp_path, "http://127.0.0.1:8080")).tls is None


def test_proxy_from_the_kubeconfig_wins(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cluster's proxy-url is used even for a loopback server and over HTTPS_PROXY."""
    monkeypatch.setenv("HTTPS_PROXY", "http://env-proxy:3128")
    path = kubeconfig(tmp_path, "https://127.0.0.1:6443", ', proxy-url: "http://kc-proxy:8080"')
    assert connect(path).proxy == "http://kc-proxy:8080"


@pytest.mark.parametrize(
    ("server", "no_proxy", "expected"),
    [
        ("https://api.example.com:6443", "", "http://env-proxy:3128"),
        ("https://api.example.com:6443", "example.com", None),
        ("https://api.example.com:6443", ".example.com", None),
        ("https://api.example.com:6443", "other.com,*", None),
        ("https://10.1.2.3:6443", "10.0.0.0/8", None),
        ("https://10.1.2.3:6443", "192.168.0.0/16", "http://env-proxy:3128"),
        ("https://api.example.com:6443", "api.example.com:443", "http://env-proxy:3128"),
        ("https://127.0.0.1:6443", "", None),
        ("https://localhost:6443", "", None),
    ],
)
def test_proxy_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, server: str, no_proxy: str, expected: str | None
) -> None:
    """HTTPS_PROXY unless NO_PROXY exempts the host (name, suffix, *, CIDR, host:port); loopback never."""
    monkeypatch.setenv("HTTPS_PROXY", "http://env-proxy:3128")
    monkeypatch.setenv("NO_PROXY", no_proxy)
    assert proxy_url(config(server)) == expected


@pytest.mark.parametrize("url", ["http://p:3128", "https://p:3129", "socks5://p:1080", "socks5h://p:1080"])
def test_proxy_schemes_client_go_accepts(monkeypatch: pytest.MonkeyPatch, url: str) -> None:
    """http, https, socks5 and socks5h proxies are taken as they are."""
    monkeypatch.setenv("HTTPS_PROXY", url)
    assert proxy_url(config("https://api.example.com:6443")) == url


def test_other_proxy_schemes_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A scheme no client speaks is refused with the ones that work."""
    monkeypatch.setenv("HTTPS_PROXY", "socks4://proxy:1080")
    with pytest.raises(ConfigError, match="must be one of http, https, socks5, socks5h"):
        proxy_url(config("https://api.example.com:6443"))
