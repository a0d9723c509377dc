"""The real controller, configured only by the chart's environment and running as the chart's account.

The chart's RBAC is installed (release ``chartctl``, leader election on) and the controller binary is
started with exactly the env of the rendered Deployment's container (downward-API fields resolved as
the kubelet would; KUBECONFIG from the chart's ``extraVolumes``/env route, pointing at a token of the
chart's controller ServiceAccount). It must take the chart's Lease, sync every informer (list/watch
allowed), and run a ComputeDomain's whole life: finalizer, workload and daemon claim templates, daemon
DaemonSet, status, and finalization on delete. Any permission the chart lacks shows up as a 403.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from imexdra_sim.builders import compute_domain
from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.localcluster.processes import free_port
from tests.support.kubectl import apply
from tests.support.waiting import eventually
from tests.unit.chart.install import ChartRBAC, install_chart_rbac

RELEASE = "chartctl"
NAMESPACE = "chart-ctl"
WORKLOADS = "chart-ctl-workloads"
POD_NAME = "chartctl-imexdra-controller-5d9c7-abcde"
LEASE = "chartctl-imexdra-controller"
PPROF = "/debug/pprof"


@pytest.fixture(scope="module")
def port() -> int:
    """The controller's metrics/probe port on loopback."""
    return free_port()


@pytest.fixture(scope="module")
def chart_rbac(cluster: LocalCluster, compute_domain_crds: None, port: int) -> Iterator[ChartRBAC]:
    """The chart's identities for a controller with leader election and a loopback metrics endpoint."""
    values = {
        "controller": {
            "replicas": 2,
            "leaderElection": {"enabled": True},
            "metrics": {"httpEndpoint": f"$(POD_IP):{port}", "profilePath": PPROF},
        }
    }
    installed = install_chart_rbac(cluster, release=RELEASE, namespace=NAMESPACE, values=values)
    cluster.create_namespace(WORKLOADS)
    yield installed
    installed.uninstall()
    for namespace in (NAMESPACE, WORKLOADS):
        cluster.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def container_env(installed: ChartRBAC, kubeconfig: Path) -> dict[str, str]:
    """The rendered container env as the kubelet would hand it over, plus KUBECONFIG."""
    (deployment,) = installed.rendered.of_kind("Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    fields = {"metadata.name": POD_NAME, "metadata.namespace": NAMESPACE, "status.podIP": "127.0.0.1"}
    env: dict[str, str] = {}
    for entry in container["env"]:
        if "valueFrom" in entry:
            env[entry["name"]] = fields[entry["valueFrom"]["fieldRef"]["fieldPath"]]
        else:
            value = entry["value"]
            for name, resolved in env.items():  # the kubelet expands $(VAR) of earlier entries
                value = value.replace(f"$({name})", resolved)
            env[entry["name"]] = value
    env["KUBECONFIG"] = str(kubeconfig)
    return env


@pytest.fixture(scope="module")
def controller(cluster: LocalCluster, chart_rbac: ChartRBAC) -> Iterator[subprocess.Popen[bytes]]:
    """The controller process, started as the chart's Deployment would start it."""
    (deployment,) = chart_rbac.rendered.of_kind("Deployment")
    command = deployment["spec"]["template"]["spec"]["containers"][0]["command"]
    env = container_env(chart_rbac, chart_rbac.kubeconfig("controller"))
    base = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    binary = Path(sys.executable).parent / command[0]
    assert cluster.run_dir is not None
    log = (cluster.run_dir / "logs" / "chart-controller.log").open("ab")
    process = subprocess.Popen(
        [str(binary), *command[1:]],
        env={**base, **env},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    yield process
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
    log.close()


def http_status(url: str) -> int:
    """The HTTP status of GET ``url`` (0 when nothing answers)."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return 0


def get_json(cluster: LocalCluster, *args: str) -> dict[str, Any] | None:
    """``kubectl get -o json``, or None when the object does not exist."""
    result = cluster.kubectl("get", *args, "-o", "json", check=False)
    if result.returncode != 0:
        return None
    obj: dict[str, Any] = json.loads(result.stdout)
    return obj


async def test_controller_runs_with_the_charts_env_and_rbac(
    cluster: LocalCluster, controller: subprocess.Popen[bytes], port: int
) -> None:
    """Lease taken, caches synced, a ComputeDomain reconciled and finalized, as the chart's account."""

    def holder() -> str:
        lease = get_json(cluster, "lease", LEASE, "-n", NAMESPACE)
        return str(lease["spec"].get("holderIdentity", "")) if lease else ""

    await eventually(
        "the chart's Lease is held by the controller", lambda: holder().startswith(POD_NAME), within=90
    )
    await eventually(
        "/readyz (every informer synced)", lambda: http_status(f"http://127.0.0.1:{port}/readyz") == 200
    )
    assert controller.poll() is None

    apply(cluster, compute_domain("cd", WORKLOADS))

    def reconciled() -> bool:
        cd = get_json(cluster, "computedomain", "cd", "-n", WORKLOADS)
        if not cd or "resource.nvidia.com/computeDomain" not in cd["metadata"].get("finalizers", []):
            return False
        uid = cd["metadata"]["uid"]
        return bool(
            cd.get("status", {}).get("status")
            and get_json(cluster, "resourceclaimtemplate", "cd-channel", "-n", WORKLOADS)
            and get_json(cluster, "resourceclaimtemplate", f"computedomain-daemon-{uid}", "-n", NAMESPACE)
            and get_json(cluster, "daemonset", f"computedomain-daemon-{uid}", "-n", NAMESPACE)
        )

    await eventually(
        "ComputeDomain reconciled (finalizer, templates, DaemonSet, status)", reconciled, within=60
    )
    cluster.kubectl("delete", "computedomain", "cd", "-n", WORKLOADS, "--wait=false")
    await eventually(
        "ComputeDomain finalized and its objects removed",
        lambda: (
            get_json(cluster, "computedomain", "cd", "-n", WORKLOADS) is None
            and get_json(cluster, "resourceclaimtemplate", "cd-channel", "-n", WORKLOADS) is None
        ),
        within=60,
    )

    def events(reason: str) -> str:
        selector = f"--field-selector=reason={reason}"
        return cluster.kubectl("get", "events", "-n", WORKLOADS, selector, "-o", "name").stdout

    await eventually("a Finalized event (events.k8s.io create allowed)", lambda: events("Finalized"))
    assert events("ReconcileFailed") == ""
    assert cluster.run_dir is not None
    log = (cluster.run_dir / "logs" / "chart-controller.log").read_text()
    # An RBAC denial reads '... is forbidden: User "..." cannot <verb> resource ...'. Other 403s are
    # not about the chart (e.g. writes into a namespace another test is deleting), and a bare "403"
    # also matches resourceVersions in the log.
    assert not re.search(r'forbidden: User \\?"[^"\\]+\\?" cannot', log), (
        "the controller was refused something"
    )
    assert controller.poll() is None


def http_text(url: str) -> tuple[int, str]:
    """Status and body of GET ``url``."""
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


async def test_profiling_endpoints_of_the_chart_controller(
    cluster: LocalCluster, controller: subprocess.Popen[bytes], port: int
) -> None:
    """controller.metrics.profilePath serves a task dump and a CPU profile of the running controller."""
    base = f"http://127.0.0.1:{port}{PPROF}"
    await eventually("/readyz", lambda: http_status(f"http://127.0.0.1:{port}/readyz") == 200)
    status, tasks = http_text(f"{base}/tasks")
    assert status == 200 and "asyncio tasks in process" in tasks
    assert "imexdra/" in tasks  # the controller's own coroutines, by module path
    status, profile = http_text(f"{base}/profile?seconds=1")
    samples = [line.rsplit(" ", 1) for line in profile.splitlines()]
    assert status == 200 and samples and all(count.isdigit() for _, count in samples)
    assert any(stack.startswith("MainThread;") for stack, _ in samples)
    assert controller.poll() is None
