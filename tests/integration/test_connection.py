"""A component's connection against the real kube-apiserver with a user the way clusters give them.

The user is an exec credential plugin (``client.authentication.k8s.io/v1``, a real executable that
prints a ServiceAccount token, or a client certificate issued by the cluster's CA) and the cluster is
reached through the proxy the kubeconfig's ``proxy-url`` names (HTTP CONNECT, CONNECT over TLS, or
SOCKS5): both clients of one connection (a lean transport and the typed client on one of its own)
must authenticate as that user, through the proxy.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import stat
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import yaml

from imexdra.common.kube.connection import Connection, connect
from imexdra.common.kube.kubeclient import KubeClient
from imexdra.common.kube.models.authentication_v1 import SelfSubjectReview
from imexdra.common.kube.transport import Transport
from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.localcluster.credentials import service_account_token
from tests.support.connectproxy import connect_proxy

pytestmark = pytest.mark.integration

REVIEW_PATH = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
EXEC_API = "client.authentication.k8s.io/v1"


@pytest.fixture(scope="module")
def account(cluster: LocalCluster) -> Iterator[tuple[str, str]]:
    """A ServiceAccount of a namespace of this module's own, and a token for it."""
    namespace = f"conn-{secrets.token_hex(3)}"
    cluster.create_namespace(namespace)
    cluster.kubectl("create", "serviceaccount", "exec-user", "-n", namespace)
    yield namespace, service_account_token(cluster, namespace, "exec-user")
    cluster.kubectl("delete", "namespace", namespace, "--wait=false")


def exec_kubeconfig(cluster: LocalCluster, directory: Path, script: str, proxy: str | None) -> Path:
    """The admin kubeconfig with its user replaced by the exec plugin ``script``, and a proxy-url."""
    plugin = directory / "credential-plugin"
    plugin.write_text(script)
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    for entry in config["clusters"]:
        if proxy is not None:
            entry["cluster"]["proxy-url"] = proxy
    for entry in config["users"]:
        entry["user"] = {
            "exec": {
                "apiVersion": EXEC_API,
                "command": str(plugin),
                "interactiveMode": "Never",
            }
        }
    path = directory / "exec.kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


def printing(credential: dict[str, object]) -> str:
    """A plugin script that prints ``credential``'s ExecCredential."""
    answer = {"apiVersion": EXEC_API, "kind": "ExecCredential", "status": credential}
    return f"#!/bin/sh\nprintf '%s' '{json.dumps(answer)}'\n"


REVIEW = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}


async def username_via_transport(transport: Transport) -> str:
    """Who the API server says the lean transport's user is (a SelfSubjectReview)."""
    answer = json.loads((await transport.request("POST", REVIEW_PATH, body=REVIEW)).body)
    return str(answer["status"]["userInfo"]["username"])


async def username_via_client(client: KubeClient) -> str:
    """Who the API server says the typed client's user is (a SelfSubjectReview)."""
    typed = await client.create(SelfSubjectReview())
    assert typed.status is not None and typed.status.userInfo is not None
    return str(typed.status.userInfo.username)


@contextlib.asynccontextmanager
async def both_clients(connection: Connection) -> AsyncIterator[tuple[Transport, KubeClient]]:
    """A lean transport of the connection and its typed client (a transport of its own), closed afterwards."""
    transport = connection.transport(user_agent="imexdra-tests")
    client = connection.kube(field_manager="connection-test")
    try:
        yield transport, client
    finally:
        transport.close()
        client.close()


@pytest.mark.parametrize("scheme", ["http", "https", "socks5"])
async def test_both_clients_authenticate_through_exec_and_proxy(
    cluster: LocalCluster,
    account: tuple[str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    scheme: str,
) -> None:
    """SelfSubjectReviews sent by the transport and by the typed client both name the exec plugin's
    ServiceAccount, and both went through the proxy (a tunnel each to the API server); through an
    https proxy the API server's TLS runs inside the proxy's."""
    namespace, token = account
    expected = f"system:serviceaccount:{namespace}:exec-user"
    async with connect_proxy(scheme, pki=tmp_path / "proxy-pki") as proxy:
        if scheme == "https":
            monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "proxy-pki" / "ca.crt"))
        connection = connect(exec_kubeconfig(cluster, tmp_path, printing({"token": token}), proxy.url))
        assert connection.proxy == proxy.url
        async with both_clients(connection) as (transport, client):
            assert await username_via_transport(transport) == expected
            assert await username_via_client(client) == expected
    authority = cluster.apiserver_url.removeprefix("https://")
    assert proxy.targets == [authority, authority]


async def test_an_exec_client_certificate_and_its_rotation(cluster: LocalCluster, tmp_path: Path) -> None:
    """An exec plugin that returns client certificates (already expired, so it runs for every request)
    alternates between two users: each client's next request is made on a new connection carrying the
    new certificate, so the API server names the user of the latest run every time — for each client,
    first one user and then the other."""
    pki = cluster.pki
    assert pki is not None
    runs = tmp_path / "runs"
    credentials = []
    for user in ("cert-user-a", "cert-user-b"):
        pair = pki.issue(f"{user}-{secrets.token_hex(2)}", common_name=user)
        answer = {
            "apiVersion": EXEC_API,
            "kind": "ExecCredential",
            "status": {
                "clientCertificateData": pair.cert.read_text(),
                "clientKeyData": pair.key.read_text(),
                "expirationTimestamp": "2020-01-01T00:00:00Z",
            },
        }
        credentials.append(tmp_path / f"{user}.json")
        credentials[-1].write_text(json.dumps(answer))
    script = (
        "#!/bin/sh\n"
        f"echo run >> {runs}\n"
        f"if [ $(($(wc -l < {runs}) % 2)) -eq 1 ]; then cat {credentials[0]}; else cat {credentials[1]}; fi\n"
    )
    connection = connect(exec_kubeconfig(cluster, tmp_path, script, None))
    async with both_clients(connection) as (transport, client):
        assert await username_via_transport(transport) == "cert-user-a"  # run 1
        assert await username_via_client(client) == "cert-user-b"  # run 2
        assert await username_via_client(client) == "cert-user-a"  # run 3
        assert await username_via_transport(transport) == "cert-user-b"  # run 4
    assert connection.credentials.certificate_generation == 4
