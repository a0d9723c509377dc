"""Cluster add-ons the seed workloads need: the Kubeflow MPI Operator, run for real.

The operator binary, its MPIJob CRD and its upstream RBAC come from tools/k8s/build.sh (the Go module
github.com/kubeflow/mpi-operator). It runs as a cluster process with its own ServiceAccount token, so
its RBAC is the upstream one, not cluster admin.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from imexdra.localcluster.cluster import LocalCluster
from imexdra.localcluster.credentials import service_account_kubeconfig
from imexdra.localcluster.processes import ManagedProcess, free_port, wait_until

MPI_OPERATOR_NAMESPACE = "mpi-operator"


def _manifests(cluster: LocalCluster) -> Path:
    assert cluster.binaries is not None
    return cluster.binaries.bin_dir.parent / "manifests" / "mpi-operator"


def start_mpi_operator(cluster: LocalCluster, *, timeout: float = 60) -> ManagedProcess:
    """Install the MPIJob CRD and the operator's RBAC, then run the operator until the cluster stops."""
    assert cluster.binaries is not None
    manifests = _manifests(cluster)
    cluster.kubectl("apply", "--server-side", "-f", str(manifests / "kubeflow.org_mpijobs.yaml"))
    cluster.kubectl("create", "namespace", MPI_OPERATOR_NAMESPACE)
    binding = yaml.safe_load((manifests / "cluster-role-binding.yaml").read_text())
    for subject in binding["subjects"]:
        subject["namespace"] = MPI_OPERATOR_NAMESPACE  # kustomize sets this upstream
    cluster.kubectl("apply", "-n", MPI_OPERATOR_NAMESPACE, "-f", str(manifests / "service-account.yaml"))
    cluster.kubectl("apply", "-f", str(manifests / "cluster-role.yaml"))
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump(binding))
    cluster.kubectl(
        "wait", "--for=condition=Established", "crd/mpijobs.kubeflow.org", f"--timeout={int(timeout)}s"
    )
    kubeconfig = service_account_kubeconfig(
        cluster, MPI_OPERATOR_NAMESPACE, "mpi-operator", duration_seconds=48 * 3600
    )
    monitoring_port = free_port()
    process = cluster.start_process(
        "mpi-operator",
        [
            str(cluster.binaries.path("mpi-operator")),
            f"-kubeConfig={kubeconfig}",
            f"-lock-namespace={MPI_OPERATOR_NAMESPACE}",
            f"-monitoring-port={monitoring_port}",
            "-alsologtostderr",
        ],
    )
    # The operator takes its leader Lease before it starts reconciling MPIJobs.
    wait_until(
        "mpi-operator leader election",
        lambda: (
            cluster.kubectl("get", "lease", "-n", MPI_OPERATOR_NAMESPACE, "-o", "name", check=False).stdout
            != ""
        ),
        timeout=timeout,
        process=process,
    )
    return process
