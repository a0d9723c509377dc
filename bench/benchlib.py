"""Pieces the benchmarks share: paths, a simulated node's plugin environment, the controller, readings.

- ``simulated_node``: the stand-in hardware (``imexdra_sim.devices.driverroot_fake``: a driver root with the
  mock NVML library and its GB200 profile and a dev root of regular files, a fake ``/proc/devices``) and
  kubelet directories of one node, as the environment of a ``compute-domain-kubelet-plugin``;
- ``HostImex``: a simulated node's own ``nvidia-imex.service`` for HostManagedIMEX (the sim's fake, as
  the rack runs it), answering ``READY`` on the command socket ``simulated_node`` tells the plugin about;
- ``BenchController``: a ComputeDomain controller as a child process (``imexdra_sim.controllerprocess``),
  started from a command template (ours by default; ``--controller-command`` runs another
  implementation against the same workload);
- ``peak_rss_mib``/``rss_mib``/``cpu_seconds``: readings from ``/proc/<pid>``.

Our controller and plugin run from ``runtimevenv`` (what the image installs), not from the dev venv.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import grpc
import yaml
from runtimevenv import runtime_venv

from imexdra.common.observability.logging import configure_logging
from imexdra.devices.hostimex import CtlHostImex, HostImexNotReadyError
from imexdra.dra._pb import dra_v1_pb2 as dra_v1
from imexdra_sim.controllerprocess import ControllerProcess
from imexdra_sim.devices import driverroot_fake
from imexdra_sim.devices.fakeimex.hostservice import SOCKET_NAME, HostImexService, service_argv
from imexdra_sim.localcluster.binaries import nvml_mock_library
from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.localcluster.processes import free_port
from imexdra_sim.promtext import Samples, parse_metrics
from imexdra_sim.waiting import poll, poll_async

# Progress logs (e.g. the local cluster's) go to stderr, so stdout carries only the JSON summary.
configure_logging(log_format="text", stream=sys.stderr)

T = TypeVar("T")

DRIVER = "compute-domain.nvidia.com"
DRIVER_NAMESPACE = "imexdra-bench"
CLIQUE = "7c9a3e1f-0d2b-4c5e-8f6a-1b2c3d4e5f60.32766"
ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
CHART_VALUES = ROOT / "deployments" / "helm" / "imexdra" / "values.yaml"
CRDS = ROOT / "deployments" / "helm" / "imexdra" / "crds"
#: Our binaries as the image has them (``runtimevenv``: the wheel and its pinned dependencies only).
RUNTIME_BIN = runtime_venv() / "bin"
PLUGIN_BIN = RUNTIME_BIN / "compute-domain-kubelet-plugin"
CONTROLLER_BIN = RUNTIME_BIN / "compute-domain-controller"

#: Our controller as a ``--controller-command`` template (the placeholders are BenchController's).
OUR_CONTROLLER_COMMAND = (
    f"{CONTROLLER_BIN} --kubeconfig={{kubeconfig}} --pod-name=bench-controller --namespace={{namespace}}"
    " --image-name=imexdra.test/compute-domain-daemon:bench --log-verbosity-cd-daemon=0"
    " --http-endpoint={http_endpoint} --feature-gates={feature_gates} --imex-mode={imex_mode}"
    " --imex-isolation={imex_isolation}"
    " --kube-api-qps={kube_api_qps} --kube-api-burst={kube_api_burst} --logging-format=json"
)
CONTROLLER_COMMAND_HELP = (
    "another ComputeDomain controller to run against the same cluster and workload, after ours; the "
    "results then carry ours/other ratios. A shell-like command line; these placeholders are filled in "
    "(and also set as environment variables): {kubeconfig} (KUBECONFIG, admin), {namespace} (NAMESPACE, "
    "the driver namespace), {feature_gates} (FEATURE_GATES), {imex_mode} (IMEX_MODE: driverManaged or "
    "hostManaged), {imex_isolation} (IMEX_ISOLATION: domain; controller_bench's channel-isolation burst "
    "runs ours only), {http_endpoint} (HTTP_ENDPOINT; when given, its /readyz or /metrics is polled "
    "before the run), {kube_api_qps} (KUBE_API_QPS), {kube_api_burst} (KUBE_API_BURST). Example: "
    "'/opt/upstream/compute-domain-controller --kubeconfig={kubeconfig} --namespace={namespace} "
    "--feature-gates=HostManagedIMEXDaemon=true --imex-mode={imex_mode} --http-endpoint={http_endpoint}'"
)


def kubectl_apply(cluster: LocalCluster, *objects: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objects))


def install_crds(cluster: LocalCluster) -> None:
    cluster.kubectl("apply", "-f", str(CRDS))
    cluster.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")


def host_imex_socket(base: Path) -> Path:
    """The command socket of the host IMEX of the simulated node under ``base`` (its ``/etc/nvidia-imex``)."""
    return base / "nvidia-imex" / SOCKET_NAME


def simulated_node(base: Path, node: str = "bench-node", clique: str = CLIQUE) -> dict[str, str]:
    """Stand-in hardware and kubelet directories under ``base``; returns the plugin's environment.

    ``IMEX_HOST_SOCKET_PATH`` is set in every mode (only host-managed reads it): under HostManagedIMEX
    a ``HostImex`` for ``base`` must serve it, as a real node's ``nvidia-imex.service`` does.
    """
    tray = driverroot_fake.Tray(node, driverroot_fake.Fabric.parse(clique))
    hardware = driverroot_fake.write_node_hardware(base, tray, nvml_library=nvml_mock_library())
    (base / "registry").mkdir(parents=True, exist_ok=True)
    return {
        "NODE_NAME": node,
        "NAMESPACE": DRIVER_NAMESPACE,
        "KUBELET_REGISTRAR_DIRECTORY_PATH": str(base / "registry"),
        "KUBELET_PLUGINS_DIRECTORY_PATH": str(base / "plugins"),
        "CDI_ROOT": str(base / "cdi"),
        # The plugin runs on the host: its driver root is where the host has it.
        "DRIVER_ROOT_CTR_PATH": str(hardware.driver_root),
        "NVIDIA_DRIVER_ROOT": str(hardware.driver_root),
        "ALT_PROC_DEVICES_PATH": str(hardware.proc_devices),
        "IMEX_HOST_SOCKET_PATH": str(host_imex_socket(base)),
        "LOGGING_FORMAT": "json",
    }


@dataclass
class HostImex:
    """The host's ``nvidia-imex.service`` of the simulated node under ``base`` (HostManagedIMEX).

    The same fake the rack runs per node (``imexdra_sim.devices.fakeimex.hostservice``): the driver
    root's ``nvidia-imex`` with a ``config.cfg`` whose command service listens on
    ``host_imex_socket(base)``. Each node is an IMEX domain of its own (its node list is itself): a
    host's IMEX domain forms when the hosts boot, long before any job, so what a job start needs of it
    is only the ``READY`` answer the plugin asks for; a rack-wide mesh of fake daemons would add peer
    probes every 0.5 s on every node, work the benchmark would then charge to the driver.
    """

    base: Path
    address: str
    """The node's own address: the daemon binds ``address:server_port`` (any 127.x address works)."""
    server_port: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def driver_root(self) -> Path:
        return self.base / "driver-root"

    def start(self) -> None:
        """``systemctl start nvidia-imex`` (``simulated_node(base)`` has written the driver root)."""
        socket = host_imex_socket(self.base)
        service = HostImexService(
            socket.parent,
            address=self.address,
            peers=[self.address],
            server_port=self.server_port,
            socket=socket,
        )
        argv = service_argv(service.write(), self.driver_root)
        with (self.base / "host-nvidia-imex.log").open("ab") as out:
            self.process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)

    async def wait_ready(self, within: float = 60) -> None:
        """Until the driver root's ``nvidia-imex-ctl -q`` answers ``READY``: the plugin's own check."""
        ctl = CtlHostImex(driver_root=self.driver_root, socket=host_imex_socket(self.base))
        answer = ""

        async def ready() -> bool:
            nonlocal answer
            try:
                await ctl.check()
            except HostImexNotReadyError as error:
                answer = str(error)
                return False
            return True

        assert self.process is not None, "start() first"
        await poll_async(
            f"the host IMEX of {self.base} READY",
            ready,
            within=within,
            interval=0.1,
            require=running(self.process, f"the host IMEX of {self.base}"),
            explain=lambda: f": {answer}",
        )

    def stop(self) -> None:
        """``systemctl stop nvidia-imex`` (no-op when stopped)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def rss_mib(self) -> float:
        """The daemon's resident set now, in MiB (0 when stopped)."""
        return rss_mib(self.process.pid)["VmRSS"] if self.process is not None else 0.0


def running(process: subprocess.Popen[bytes], what: str) -> Callable[[], None]:
    """A wait's ``require`` (``imexdra_sim.waiting``): ends the wait once ``process`` has exited."""

    def check() -> None:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}")

    return check


def wait_for_socket(socket: Path, process: subprocess.Popen[bytes], within: float = 60) -> None:
    """Until the plugin ``process`` serves ``socket``."""
    poll(
        f"the plugin serving {socket}",
        socket.exists,
        within=within,
        interval=0.1,
        require=running(process, "plugin"),
    )


def _status_fields(pid: int) -> dict[str, float]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = round(int(value.split()[0]) / 1024, 1)
    return fields


def peak_rss_mib(pid: int) -> float:
    """The process's peak resident set (VmHWM) in MiB."""
    return _status_fields(pid)["VmHWM"]


def rss_mib(pid: int) -> dict[str, float]:
    """Current (VmRSS) and peak (VmHWM) resident set in MiB."""
    return _status_fields(pid)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of ``pid`` (a load-independent measure next to the latencies)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def gathered(calls: Iterable[Awaitable[T]], limit: int = 50) -> list[T]:
    """Await ``calls`` with at most ``limit`` in flight, as a user's tooling sends many requests."""
    gate = asyncio.Semaphore(limit)

    async def one(call: Awaitable[T]) -> T:
        async with gate:
            return await call

    return await asyncio.gather(*(one(c) for c in calls))


def chart_controller_rate() -> tuple[float, int]:
    """The controller's client limit as the chart sets it (``controller.kubeAPI`` in values.yaml)."""
    values = yaml.safe_load(CHART_VALUES.read_text(encoding="utf-8"))
    limit = values["controller"]["kubeAPI"]
    return float(limit["qps"]), int(limit["burst"])


def add_controller_rate_args(parser: argparse.ArgumentParser) -> None:
    """``--controller-qps`` and ``--controller-burst``, by default the chart's (the binary's: 5 and 10)."""
    qps, burst = chart_controller_rate()
    parser.add_argument(
        "--controller-qps", type=float, default=qps, help=f"controller --kube-api-qps (chart: {qps:g})"
    )
    parser.add_argument(
        "--controller-burst", type=int, default=burst, help=f"controller --kube-api-burst (chart: {burst})"
    )


def feature_gates(*, host_managed: bool, binding_conditions: bool = False) -> str:
    """The FEATURE_GATES value our controller and plugins run with, in one of the benches' modes."""
    gates = ["HostManagedIMEX=true"] if host_managed else []
    if binding_conditions:
        gates.append("ComputeDomainBindingConditions=true")
    return ",".join(gates)


@dataclass
class BenchController(ControllerProcess):
    """A ComputeDomain controller as a child process, from a command template (ours by default).

    The simulator's one controller runner (``imexdra_sim.controllerprocess``) with the benchmarks'
    command line: ``command`` with the placeholders of ``CONTROLLER_COMMAND_HELP`` filled in, and
    the same values in the environment.
    """

    kubeconfig: Path
    log_path: Path
    host_managed: bool
    #: ``--imex-isolation``: ``domain`` or ``channel`` (host-managed only).
    isolation: str = "domain"
    qps: float = 5.0
    burst: int = 10
    command: str = OUR_CONTROLLER_COMMAND
    #: Gate ComputeDomainBindingConditions (docs/binding-conditions.md; ours only).
    binding_conditions: bool = False
    port: int = field(default_factory=free_port)
    name: str = "bench-controller"

    @property
    def ours(self) -> bool:
        return self.command == OUR_CONTROLLER_COMMAND

    def __post_init__(self) -> None:
        if not self.ours:  # another implementation may serve no /readyz: /metrics answering tells it is up
            self.ready_paths = ("/readyz", "/metrics")

    def values(self) -> dict[str, str]:
        return {
            "kubeconfig": str(self.kubeconfig),
            "namespace": DRIVER_NAMESPACE,
            "feature_gates": feature_gates(
                host_managed=self.host_managed, binding_conditions=self.binding_conditions
            ),
            "imex_mode": "hostManaged" if self.host_managed else "driverManaged",
            "imex_isolation": self.isolation,
            "http_endpoint": f"127.0.0.1:{self.port}",
            "kube_api_qps": f"{self.qps:g}",
            "kube_api_burst": str(self.burst),
        }

    def argv(self) -> list[str]:
        return shlex.split(self.command.format(**self.values()))

    def environment(self) -> dict[str, str]:
        values = {key.upper(): value for key, value in self.values().items()}
        return {**os.environ, **values, "POD_NAME": self.name}

    async def wait_ready(self, within: float = 60) -> None:
        """Until ``/readyz`` (or, for another implementation, ``/metrics``) answers 200.

        Another implementation whose command has no ``{http_endpoint}`` has nothing to ask: it is only
        checked to be alive after 2 s; the benchmarks then warm up with one domain before measuring.
        """
        if "{http_endpoint}" not in self.command:
            await asyncio.sleep(2)
            self.require_alive()
            return
        await super().wait_ready(within)

    def metrics(self) -> Samples:
        """Its /metrics; none when another implementation serves none (its own figures then read 0)."""
        status, text = self.get("/metrics")
        return parse_metrics(text) if status == 200 else {}

    def rss_mib(self) -> dict[str, float]:
        return rss_mib(self.pid)

    def cpu_seconds(self) -> float:
        """User + system CPU time the controller has used so far."""
        return cpu_seconds(self.pid)


@dataclass
class Profiler:
    """py-spy recording a process (non-blocking sampling) into raw collapsed stacks."""

    pid: int
    output: Path
    rate: int = 100
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        py_spy = Path(sys.executable).parent / "py-spy"
        argv = [str(py_spy), "record", "--pid", str(self.pid), "--rate", str(self.rate), "--nonblocking"]
        argv += ["--format", "raw", "--output", str(self.output)]
        self.process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> dict[str, Any]:
        assert self.process is not None
        self.process.send_signal(signal.SIGINT)
        self.process.wait(timeout=60)
        return summarize_profile(self.output)


def summarize_profile(path: Path, top: int = 12) -> dict[str, Any]:
    """The hottest functions of a raw py-spy profile: by own samples and by samples below them."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    samples = 0
    if not path.exists():
        return {"samples": 0}
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        samples += count
        # "function (/long/path/package/module.py:line)" -> "function (package/module.py:line)"
        frames = [
            frame.split(" (")[0] + " (" + "/".join(frame.split(" (")[-1].split("/")[-2:])
            for frame in stack.split(";")
        ]
        own[frames[-1]] += count
        for frame in {f for f, full in zip(frames, stack.split(";"), strict=True) if _ours(full)}:
            inclusive[frame] += count
    return {
        "samples": samples,
        "own_top": [(frame, round(n / samples, 3)) for frame, n in own.most_common(top)],
        "inclusive_top": [(frame, round(n / samples, 3)) for frame, n in inclusive.most_common(top * 2)],
    }


_OUR_AND_CLIENT_PACKAGES = ("imexdra/", "grpclib/", "h2/", "hpack/")


def _ours(frame: str) -> bool:
    return any(package in frame for package in _OUR_AND_CLIENT_PACKAGES)


class DraStub:
    """A grpcio client of a plugin's v1 DRA service, as the kubelet calls it (the plugin serves grpclib)."""

    def __init__(self, channel: grpc.aio.Channel) -> None:
        service = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/"
        self.NodePrepareResources = channel.unary_unary(
            service + "NodePrepareResources",
            request_serializer=dra_v1.NodePrepareResourcesRequest.SerializeToString,
            response_deserializer=dra_v1.NodePrepareResourcesResponse.FromString,
        )
        self.NodeUnprepareResources = channel.unary_unary(
            service + "NodeUnprepareResources",
            request_serializer=dra_v1.NodeUnprepareResourcesRequest.SerializeToString,
            response_deserializer=dra_v1.NodeUnprepareResourcesResponse.FromString,
        )
