"""One connection per component: the proxy it resolves and the clients it builds."""

from __future__ import annotations

import pathlib

import httpx2
import pytest
from lightkube.config.kubeconfig import SingleConfig
from lightkube.config.models import Cluster, Context, User

from imexdra.common.connection import connect, make_client, proxy_url
from imexdra.common.errors import ConfigError
from imexdra.common.kube import http_client

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


async def test_make_client_meters_lightkube_s_transports(tmp_path: pathlib.Path) -> None:
    """The internals we rely on exist (guard for the exact pin): httpx client, its transport and mounts;
    our credentials are its auth."""
    client = make_client(
        field_manager="test", kubeconfig=kubeconfig(tmp_path, "https://127.0.0.1:6443"), qps=5
    )
    http = http_client(client)
    assert isinstance(http, httpx2.AsyncClient)
    assert str(http.base_url) == "https://127.0.0.1:6443"
    assert type(http._transport).__name__ == "_MeteredTransport"
    assert all(t is None or type(t).__name__ == "_MeteredTransport" for t in http._mounts.values())
    assert type(http.auth).__name__ == "CredentialsAuth"
    await client.close()


async def test_the_client_proxies_exactly_as_the_connection_decided(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """lightkube's httpx client gets the connection's proxy and none of its own from the environment:
    with HTTPS_PROXY set, a loopback server is reached directly, a kubeconfig proxy-url through it."""
    monkeypatch.setenv("HTTPS_PROXY", "http://env-proxy:3128")
    direct = make_client(field_manager="t", kubeconfig=kubeconfig(tmp_path, "https://127.0.0.1:6443"))
    assert http_client(direct)._mounts == {}
    await direct.close()
    path = kubeconfig(tmp_path, "https://127.0.0.1:6443", ', proxy-url: "http://kc-proxy:8080"')
    proxied = make_client(field_manager="t", kubeconfig=path)
    mounts = http_client(proxied)._mounts
    assert len(mounts) == 1
    assert [type(t).__name__ for t in mounts.values()] == ["_MeteredTransport"]
    await proxied.close()


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


def test_only_http_connect_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    """A socks or https proxy is refused with what would work."""
    monkeypatch.setenv("HTTPS_PROXY", "socks5://proxy:1080")
    with pytest.raises(ConfigError, match="only http:// proxies"):
        proxy_url(config("https://api.example.com:6443"))
