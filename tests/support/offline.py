"""A Kubernetes client of a cluster that does not exist, for unit tests of code that needs one built.

Informers, caches and stores take a client when they are made and use it only when they run; a unit
test that fills their stores by hand never lets them run, so no request is ever sent.
"""

from __future__ import annotations

from pathlib import Path

from imexdra.common.kube.connection import make_client
from imexdra.common.kube.kubeclient import KubeClient

KUBECONFIG = """
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: ctx, context: {cluster: c, user: u}}]
current-context: ctx
"""


def offline_client(directory: Path) -> KubeClient:
    """A client of no cluster, its kubeconfig written to ``directory``; close it when done."""
    path = directory / "offline.kubeconfig"
    path.write_text(KUBECONFIG)
    return make_client(field_manager="imexdra-test", kubeconfig=path)
