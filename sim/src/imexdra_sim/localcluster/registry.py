"""The cluster's container registry: where a release is pushed and containerd nodes pull from.

An operator installs imexdra from a registry: the image index and the Helm chart are pushed to it
(``make release``, tools/release.py), ``helm install`` takes the chart from it and every node's
containerd pulls the image by digest. A cluster started with ``LocalCluster(registry=True)`` runs one
the same way (docs/registry.md): go-containerregistry's registry (tools/k8s/oci), built from its Go
module like the other binaries, listening on the machine's fabric address, where the nodes' network
namespaces reach it, over TLS with a serving certificate of the cluster's CA. Each node's containerd is
told of it as an operator tells theirs: ``certs.d/<host:port>/hosts.toml`` naming that CA. Its blobs
live in the run directory, its manifests in its memory: the registry lives and dies with the cluster.
"""

from __future__ import annotations

import ssl
import urllib.error
from dataclasses import dataclass
from pathlib import Path

from imexdra_sim.localcluster.binaries import Binaries
from imexdra_sim.localcluster.pki import ClusterPKI
from imexdra_sim.localcluster.probes import http_get
from imexdra_sim.localcluster.processes import ManagedProcess, Supervisor, wait_until

PORT = 5000
"""The registry's port on the fabric address (a fabric address is one cluster's alone)."""


@dataclass(frozen=True, slots=True)
class Registry:
    """A running registry: where to push and pull (``host``, i.e. ``<ip>:<port>``) and its CA."""

    host: str
    ca: Path
    process: ManagedProcess

    def reachable(self) -> bool:
        """Whether ``GET /v2/`` answers (the distribution API's version check) over verified TLS."""
        context = ssl.create_default_context(cafile=str(self.ca))
        try:
            http_get(f"https://{self.host}/v2/", context)
        except (OSError, urllib.error.URLError):
            return False
        return True


def start_registry(
    address: str, directory: Path, pki: ClusterPKI, binaries: Binaries, supervisor: Supervisor
) -> Registry:
    """Run the registry on ``address`` (a machine IP), blobs under ``directory``; wait until it answers."""
    serving = pki.issue("registry", common_name="imexdra-registry", ip_addresses=(address,), server=True)
    host = f"{address}:{PORT}"
    process = supervisor.start(
        "registry",
        [
            str(binaries.path("oci-registry")),
            f"--address={host}",
            f"--blobs={directory}",
            f"--tls-cert={serving.cert}",
            f"--tls-key={serving.key}",
        ],
    )
    registry = Registry(host=host, ca=pki.ca.cert, process=process)
    wait_until("the cluster's registry answers /v2/", registry.reachable, timeout=30, process=process)
    return registry


def hosts_toml(registry: Registry) -> str:
    """A node's ``certs.d/<host>/hosts.toml`` for the registry: pull and resolve over TLS with its CA."""
    return f"""# The cluster's registry (imexdra_sim.localcluster.registry), configured as a private one.
server = "https://{registry.host}"

[host."https://{registry.host}"]
  capabilities = ["pull", "resolve"]
  ca = "{registry.ca}"
"""
