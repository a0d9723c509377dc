"""A component's connection against the real kube-apiserver with a user the way clusters give them.

The user is an exec credential plugin (``client.authentication.k8s.io/v1``, a real executable that
prints a ServiceAccount token) and the cluster is reached through an HTTP CONNECT proxy named by the
kubeconfig's ``proxy-url``: both clients of one connection (the lean transport and lightkube's) must
authenticate as that ServiceAccount, through the proxy.
"""

from __future__ import annotations

import json
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from lightkube.resources.authentication_v1 import SelfSubjectReview

from imexdra.common.connection import connect
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


def exec_kubeconfig(cluster: LocalCluster, directory: Path, token: str, proxy: str) -> Path:
    """The admin kubeconfig with its user replaced by an exec plugin printing ``token``, and a proxy-url."""
    plugin = directory / "credential-plugin"
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"token": token},
    }
    plugin.write_text(f"#!/bin/sh\nprintf '%s' '{json.dumps(credential)}'\n")
    plugin.chmod(plugin.stat().st_mode | stat.S_IXUSR)
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    for entry in config["clusters"]:
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


async def test_both_clients_authenticate_through_exec_and_proxy(
    cluster: LocalCluster, account: tuple[str, str], tmp_path: Path
) -> None:
    """SelfSubjectReviews sent by the transport and by lightkube both name the exec plugin's
    ServiceAccount, and both went through the proxy (CONNECT to the API server)."""
    namespace, token = account
    expected = f"system:serviceaccount:{namespace}:exec-user"
    async with connect_proxy() as proxy:
        connection = connect(exec_kubeconfig(cluster, tmp_path, token, proxy.url))
        assert connection.proxy == proxy.url
        transport = connection.transport(user_agent="imexdra-tests")
        client = connection.client(field_manager="connection-test")
        try:
            review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
            answer = json.loads((await transport.request("POST", REVIEW_PATH, body=review)).body)
            assert answer["status"]["userInfo"]["username"] == expected
            through_transport = len(proxy.targets)
            typed = await client.create(SelfSubjectReview())
            assert typed.status is not None and typed.status.userInfo is not None
            assert typed.status.userInfo.username == expected
        finally:
            transport.close()
            await client.close()
    authority = cluster.apiserver_url.removeprefix("https://")
    assert through_transport == 1
    assert proxy.targets == [authority, authority]
