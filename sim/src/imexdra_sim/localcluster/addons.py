"""Cluster add-ons the seed workloads need: the Kubeflow MPI Operator, run for real.

The operator binary, its MPIJob CRD and its upstream RBAC come from tools/k8s/build.sh (the Go module
github.com/kubeflow/mpi-operator). It runs as a cluster process with its own ServiceAccount token, so
its RBAC is the upstream one, not cluster admin.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

import structlog
import yaml

from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.localcluster.credentials import service_account_kubeconfig
from imexdra_sim.localcluster.processes import ClusterStartError, ManagedProcess, free_port, wait_until

MPI_OPERATOR_NAMESPACE = "mpi-operator"
HEALTH_PORT_WAIT = 900.0

log = structlog.get_logger(__name__)


def health_port_lock() -> str:
    """The lock file of ``:8080`` in this process's network namespace (the operator runs in it).

    A port is taken per network namespace: clusters in namespaces of their own (the test lanes of
    ``make test``, docs/testing.md) each have a ``:8080`` of their own, and must not wait on each other.
    """
    namespace = Path("/proc/self/ns/net").stat().st_ino
    return f"/tmp/imexdra-mpi-operator-8080-net{namespace}.lock"


def hold_health_port_lock(path: str, *, timeout: float) -> int:
    """Take the lock on the operator's health port (``health_port_lock``) and return its file descriptor.

    The operator binds ``:8080`` for its health check, hard-coded, on the host network like every
    process here; a second local cluster's operator in the same network namespace (another test
    session, ``imexdra demo``) would die on "address already in use". Waiting for the first one is
    better than a confusing failure.
    """
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    deadline = time.monotonic() + timeout
    announced = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                raise ClusterStartError(
                    f"another local cluster's MPI operator still holds :8080 (lock {path}) "
                    f"after {timeout:.0f}s; stop that cluster (or its test session) first"
                ) from None
            if not announced:
                log.warning("waiting for another local cluster's MPI operator to release :8080")
                announced = True
            time.sleep(1.0)


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
    lock = hold_health_port_lock(health_port_lock(), timeout=HEALTH_PORT_WAIT)
    try:
        process = cluster.start_process(
            "mpi-operator",
            [
                str(cluster.binaries.path("mpi-operator")),
                f"-kubeConfig={kubeconfig}",
                f"-lock-namespace={MPI_OPERATOR_NAMESPACE}",
                f"-monitoring-port={monitoring_port}",
                "-alsologtostderr",
            ],
            pass_fds=(lock,),  # the operator holds the lock until it exits
        )
    finally:
        os.close(lock)
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
