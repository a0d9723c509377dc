"""``imexdra demo``: the seed workload on a simulated NVL72 rack, end to end, with progress.

Brings up the local cluster shaped as a rack, installs imexdra with its Helm chart (controller and
kubelet plugin run as pods), runs the real Kubeflow MPI Operator, then submits the seed's ComputeDomain
and MPIJob as the seed prints them (``examples/gb200-mpijob.yaml``, through ``seedworkloads``: 4 GPUs,
110 CPUs and 960 GiB per worker, pod affinity on ``nvidia.com/gpu.clique``, the generated claim
template) and shows what a user would look at.
A rack of fewer than 18 nodes runs as many workers as it has nodes; nothing else differs.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click
import yaml

from imexdra_sim import rack, seedworkloads
from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.localcluster.processes import exit_on_sigterm
from imexdra_sim.waiting import poll

WORKLOAD_NAMESPACE = "nvbandwidth"
#: The names in examples/gb200-mpijob.yaml (tests/unit/test_examples.py holds the file to them).
DOMAIN = "imex-domain"
CLAIM_TEMPLATE = "imex-channel-0"
JOB = "dra-example-gb200-4x"


class Progress:
    """Numbered steps with their durations, for a user watching the demo."""

    def __init__(self) -> None:
        """Start the clock."""
        self.start = time.monotonic()
        self.timings: dict[str, float] = {}
        self._step = 0

    @contextmanager
    def step(self, title: str) -> Iterator[None]:
        """Print the step, run it, print how long it took."""
        self._step += 1
        click.secho(f"[{self._step}] {title} ...", bold=True)
        t0 = time.monotonic()
        yield
        self.timings[title] = time.monotonic() - t0
        click.echo(f"    done in {self.timings[title]:.1f}s")


def _json(cluster: LocalCluster, *args: str) -> Any:
    return json.loads(cluster.kubectl(*args, "-o", "json").stdout)


def _workers_running(cluster: LocalCluster, workers: int) -> bool:
    pods = _json(
        cluster, "get", "pods", "-n", WORKLOAD_NAMESPACE, "-l", "training.kubeflow.org/job-role=worker"
    )
    running = [p for p in pods["items"] if p["status"].get("phase") == "Running"]
    return len(running) == workers


def _domain_ready(cluster: LocalCluster) -> bool:
    cd = _json(cluster, "get", "computedomain", DOMAIN, "-n", WORKLOAD_NAMESPACE)
    return bool(cd.get("status", {}).get("status") == "Ready")


def _pods(cluster: LocalCluster, namespace: str, selector: str) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = _json(cluster, "get", "pods", "-n", namespace, "-l", selector)["items"]
    return sorted(pods, key=lambda p: str(p["metadata"]["name"]))


def show_worker_logs(cluster: LocalCluster) -> None:
    """Print each worker container's own view of its IMEX channels, read back with ``kubectl logs``."""
    for pod in _pods(cluster, WORKLOAD_NAMESPACE, "training.kubeflow.org/job-role=worker"):
        name = pod["metadata"]["name"]
        click.echo(f"$ kubectl logs -n {WORKLOAD_NAMESPACE} {name}    # on {pod['spec']['nodeName']}")
        click.echo(cluster.kubectl("logs", "-n", WORKLOAD_NAMESPACE, name).stdout)


def show_daemon_imex(cluster: LocalCluster) -> None:
    """Print, per IMEX daemon container, where its /usr/bin/nvidia-imex comes from (its mount's source)."""
    script = "grep ' /usr/bin/nvidia-imex ' /proc/self/mountinfo"
    for pod in _pods(cluster, rack.DRIVER_NAMESPACE, "resource.nvidia.com/computeDomain"):
        name = pod["metadata"]["name"]
        exec_ = ("exec", "-n", rack.DRIVER_NAMESPACE, name, "--", "sh", "-c", script)
        fields = cluster.kubectl(*exec_).stdout.split()
        source, options = (fields[3], fields[5]) if len(fields) > 5 else ("(not mounted)", "")
        click.echo(f"    {name} on {pod['spec']['nodeName']}:")
        click.echo(f"      /usr/bin/nvidia-imex <- {source} ({options})")


def show_injected_channels(cluster: LocalCluster) -> None:
    """Print, per worker container, the CDI devices the runtime received and the device nodes they add."""
    for pod in _pods(cluster, WORKLOAD_NAMESPACE, "training.kubeflow.org/job-role=worker"):
        node = cluster.node(pod["spec"]["nodeName"])
        creates = [r for r in node.cri_records("CreateContainer") if r["pod_uid"] == pod["metadata"]["uid"]]
        for record in creates:
            paths = device_paths(node.host_dir / "var/run/cdi", record["cdi_devices"])
            click.echo(
                f"    {pod['metadata']['name']:<28} {node.name:<10} {', '.join(record['cdi_devices']) or '-'}"
                f"\n    {'':<28} {'':<10} -> {', '.join(paths) or '(no device nodes)'}"
            )


def device_paths(cdi_dir: Path, devices: list[str]) -> list[str]:
    """Device node paths that the named CDI devices add, read from the node's CDI spec files."""
    paths = []
    for spec_file in sorted(cdi_dir.glob("*.yaml")):
        spec = yaml.safe_load(spec_file.read_text())
        for device in spec.get("devices", []):
            if f"{spec['kind']}={device['name']}" in devices:
                paths += [n["path"] for n in device.get("containerEdits", {}).get("deviceNodes", [])]
    return paths


def run_demo(config: rack.RackConfig, *, keep: bool) -> dict[str, float]:
    """Run the whole demo; return its step timings."""
    progress = Progress()
    succeeded = False
    exit_on_sigterm()  # a killed demo still stops its cluster (the finally below)
    cluster = rack.new_rack_cluster(config)
    mode = "HostManagedIMEX" if config.host_managed else "driver-managed IMEX"
    runtime = "containerd + runc, the project's image" if config.runtime == "containerd" else "fakecri"
    if config.network_policy:
        runtime += ", NetworkPolicies enforced"
    if config.from_registry:
        runtime += ", installed from the cluster's registry"
    click.secho(
        f"imexdra demo: {config.nodes}-node simulated GB200 rack, {mode}, on {runtime}", fg="green", bold=True
    )
    click.echo(f"run directory (logs, kubeconfig): {cluster.run_dir}")
    try:
        rack.bring_up(cluster, config, progress.step)
        click.echo(cluster.kubectl("get", "pods", "-n", rack.DRIVER_NAMESPACE, "-o", "wide").stdout)
        cluster.create_namespace(WORKLOAD_NAMESPACE)
        with progress.step(
            f"create ComputeDomain {DOMAIN} and MPIJob {JOB} ({config.nodes} workers x 4 GPUs)"
        ):
            seed = seedworkloads.mpijob(WORKLOAD_NAMESPACE, workers=config.nodes)
            cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(seed))
            # A full rack on 2 cores is CPU-bound: 18 nodes' kubelets, IMEX daemons and their probes
            # (docs/node-runtime.md §9); the waits grow with the rack.
            workers_running = functools.partial(_workers_running, cluster, config.nodes)
            poll("all workers Running", workers_running, within=120 + 20 * config.nodes, interval=0.5)
            poll(
                "ComputeDomain Ready",
                lambda: _domain_ready(cluster),
                within=60 + 20 * config.nodes,
                interval=0.5,
            )
        click.secho("\nWhat a user sees:", bold=True)
        for args in (
            ("get", "computedomain", "-n", WORKLOAD_NAMESPACE, "-o", "wide"),
            ("get", "resourceclaim", "-n", WORKLOAD_NAMESPACE),
            ("get", "pods", "-n", WORKLOAD_NAMESPACE, "-o", "wide"),
            *(
                ()
                if config.host_managed
                else (
                    ("get", "computedomaincliques", "-n", rack.DRIVER_NAMESPACE, "-o", "yaml"),
                    ("get", "pods", "-n", rack.DRIVER_NAMESPACE, "-o", "wide"),
                )
            ),
            # Enforced on every node by kube-router (docs/tenancy.md, "Network").
            *((("get", "networkpolicies", "-n", rack.DRIVER_NAMESPACE),) if config.network_policy else ()),
        ):
            click.echo(f"$ kubectl {' '.join(args)}")
            click.echo(cluster.kubectl(*args).stdout)
        click.secho("IMEX channel injected into each worker container:", bold=True)
        if config.runtime == "containerd":
            show_worker_logs(cluster)
            if not config.host_managed:
                title = "nvidia-imex in each IMEX daemon container (a CDI mount from the node's driver root):"
                click.secho(title, bold=True)
                show_daemon_imex(cluster)
        else:
            show_injected_channels(cluster)
        with progress.step("delete the MPIJob and the ComputeDomain"):
            cluster.kubectl("delete", "mpijob", JOB, "-n", WORKLOAD_NAMESPACE, "--wait=true", timeout=180)
            cluster.kubectl(
                "delete", "computedomain", DOMAIN, "-n", WORKLOAD_NAMESPACE, "--wait=true", timeout=180
            )
        succeeded = True
    except (TimeoutError, subprocess.CalledProcessError):
        _explain_failure(cluster)
        raise
    finally:
        total = time.monotonic() - progress.start
        click.secho(
            f"\ntimings: {json.dumps({k: round(v, 1) for k, v in progress.timings.items()})}", fg="cyan"
        )
        kept = keep or not succeeded  # a failed run keeps its logs for diagnosis
        click.secho(f"total {total:.1f}s" + (f"; logs in {cluster.run_dir}/logs" if kept else ""), fg="cyan")
        try:
            if keep:
                click.echo(f"cluster kept running: export KUBECONFIG={cluster.kubeconfig}  (Ctrl-C to stop)")
                _wait_for_interrupt()
        finally:
            cluster.stop()
        if not kept and cluster.run_dir is not None:
            shutil.rmtree(cluster.run_dir, ignore_errors=True)
    return progress.timings


def _explain_failure(cluster: LocalCluster) -> None:
    """Show what a user would look at when the demo stalls: pods and recent warning events."""
    click.secho("\nthe demo failed; cluster state:", fg="red", bold=True)
    for args in (
        ("get", "pods", "-A", "-o", "wide"),
        ("get", "events", "-A", "--field-selector=type=Warning", "--sort-by=.lastTimestamp"),
    ):
        result = cluster.kubectl(*args, check=False)
        click.echo(f"$ kubectl {' '.join(args)}\n{result.stdout}{result.stderr}")


def _wait_for_interrupt() -> None:
    try:
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
