"""The seeds' workloads, from their files in ``examples/``, sized for the rack they run on.

``examples/gb200-mpijob.yaml`` is CoreWeave's GB200 example (an MPIJob across a full NVL72 rack: 18
workers x 4 GPUs, the launcher's and workers' cpu/memory requests, the clique pod affinity) with the
ComputeDomain of the same document, character for character but for the placeholders the document asks
the reader to fill. ``examples/computedomain-deployment.yaml`` is the ComputeDomain and the 18-replica
Deployment with the ``cd-0`` claim of NVIDIA's introduction to ComputeDomains, comments included.
docs/local-cluster.md §2, "The seed workloads, as written", says where each comes from. The simulated
nodes are GB200 trays to the kubelet (``localcluster.machine``), so these requests are scheduled and
admitted as on a real rack. Where the demo must differ (fewer workers on a smaller rack), it says so
there too.
"""

from __future__ import annotations

from typing import Any

from imexdra_sim import examples

MPIJOB_EXAMPLE = "gb200-mpijob.yaml"
"""CoreWeave's ComputeDomain and GB200 MPIJob."""
DEPLOYMENT_EXAMPLE = "computedomain-deployment.yaml"
"""The ComputeDomain and Deployment of NVIDIA's introduction (``mnnvl-workload`` is the ubuntu
stand-in's channel check)."""
IMAGE = "ghcr.io/nvidia/k8s-samples:nvbandwidth-v0.7-8d103163"
"""The seed MPIJob's image (the rack's runtime runs a stand-in under this name, tools/image/build.sh)."""

RACK_WORKERS = 18
"""Workers of the seed MPIJob: one per tray of a full rack."""


def mpijob(namespace: str, *, workers: int = RACK_WORKERS) -> list[dict[str, Any]]:
    """CoreWeave's ComputeDomain and GB200 MPIJob, as ``kubectl apply -n namespace`` would create them.

    ``workers`` is below 18 only for racks of fewer trays.
    """
    domain, job = examples.load(MPIJOB_EXAMPLE, namespace)
    job["spec"]["mpiReplicaSpecs"]["Worker"]["replicas"] = workers
    return [domain, job]


def computedomain_deployment(namespace: str, *, replicas: int = RACK_WORKERS) -> list[dict[str, Any]]:
    """The ComputeDomain and Deployment of NVIDIA's introduction.

    ``namespace`` is where ``kubectl apply -n`` would put them; ``replicas`` is below 18 only for racks
    of fewer trays.
    """
    domain, deployment = examples.load(DEPLOYMENT_EXAMPLE, namespace)
    deployment["spec"]["replicas"] = replicas
    return [domain, deployment]
