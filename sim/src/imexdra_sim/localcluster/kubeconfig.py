"""Kubeconfig files for the local cluster's clients: one writer for certificate and token users."""

from __future__ import annotations

from pathlib import Path

import yaml

from imexdra_sim.localcluster.pki import CertPair


def write_kubeconfig(
    path: Path,
    *,
    server: str,
    ca: Path,
    user: str,
    client: CertPair | None = None,
    token: str | None = None,
    namespace: str | None = None,
) -> Path:
    """Write a single-context kubeconfig (mode 0600) for ``user``, by client certificate or token."""
    if (client is None) == (token is None):
        raise ValueError("give exactly one of client= and token=")
    credentials = (
        {"token": token}
        if client is None
        else {"client-certificate": str(client.cert), "client-key": str(client.key)}
    )
    context = {"cluster": "local", "user": user, **({"namespace": namespace} if namespace else {})}
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": "local", "context": context}],
        "current-context": "local",
    }
    # Created 0600 before the secret is written, so it is never readable by others, even briefly.
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path
