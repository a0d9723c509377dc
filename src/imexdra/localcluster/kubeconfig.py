"""Kubeconfig files for the local cluster's clients."""

from __future__ import annotations

from pathlib import Path

import yaml

from imexdra.localcluster.pki import CertPair


def write_kubeconfig(path: Path, *, server: str, ca: Path, client: CertPair, user: str) -> Path:
    """Write a single-context kubeconfig authenticating with a client certificate."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [
            {
                "name": user,
                "user": {"client-certificate": str(client.cert), "client-key": str(client.key)},
            }
        ],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
        "current-context": "local",
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    path.chmod(0o600)
    return path
