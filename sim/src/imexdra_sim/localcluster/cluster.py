"""The whole local cluster: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and nodes.

``LocalCluster`` is what tests, the demo and the benchmarks use. It runs real Kubernetes v1.36
binaries (another minor's with ``IMEXDRA_KUBE_VERSION``, docs/kubernetes-versions.md) with real TLS,
RBAC + Node authorization, service-account token signing and admission on.
Nodes run fakecri (containers as host processes) or a real containerd with runc, joined by a pod
network of their own (docs/node-runtime.md); a cluster with containerd nodes also gets a CPU-only
control-plane node running cluster DNS, as kubeadm and kind clusters have. Everything of one run,
logs included, is under ``run_dir``; ``stop()`` kills every child by process group.
"""

from __future__ import annotations

import functools
import shutil
import ssl
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import structlog
import yaml

from imexdra.common.errors import ConfigError
from imexdra_sim.localcluster import dns, enforcer
from imexdra_sim.localcluster.binaries import Binaries, locate
from imexdra_sim.localcluster.cgroups import remove_stale_runs
from imexdra_sim.localcluster.containerd import kill_shims
from imexdra_sim.localcluster.fabric import Fabric
from imexdra_sim.localcluster.hostlimits import ensure_inotify_instances
from imexdra_sim.localcluster.kubeconfig import write_kubeconfig
from imexdra_sim.localcluster.nodes import (
    HostImage,
    Node,
    NodeNetwork,
    NodeSpec,
    forget_processes,
    new_node,
    power_off,
    start_node,
)
from imexdra_sim.localcluster.pki import CertPair, ClusterPKI
from imexdra_sim.localcluster.probes import healthz_ok, http_get, insecure_context
from imexdra_sim.localcluster.processes import (
    ClusterStartError,
    ManagedProcess,
    Supervisor,
    exit_on_sigterm,
    free_port,
    wait_until,
)
from imexdra_sim.localcluster.registry import Registry, start_registry

log = structlog.get_logger(__name__)

SERVICE_CIDR = "10.0.0.0/24"
KUBERNETES_SERVICE_IP = "10.0.0.1"
CONTROL_PLANE_NODE = "control-plane"
NODE_START_THREADS = 8
"""At most this many nodes start at once (the scale tier starts dozens of fakecri nodes)."""


def control_plane_spec() -> NodeSpec:
    """The CPU-only control-plane node of a containerd cluster: tainted, no GPUs, hosts cluster DNS."""
    return NodeSpec(
        name=CONTROL_PLANE_NODE, runtime="containerd", taints=(f"{dns.CONTROL_PLANE_ROLE}:NoSchedule",)
    )


def host_ip() -> str:
    """Return the machine's primary non-loopback IPv4 address (kubelets refuse loopback node IPs)."""
    out = subprocess.run(["hostname", "-I"], capture_output=True, text=True, check=False).stdout
    for candidate in out.split():
        if "." in candidate and not candidate.startswith("127."):
            return candidate
    raise ClusterStartError("no non-loopback IPv4 address found for the kubelets' --node-ip")


@dataclass
class LocalCluster:
    """A real local control plane with simulated nodes; use as a context manager or start()/stop()."""

    nodes_specs: list[NodeSpec] = field(default_factory=list)
    run_dir: Path | None = None
    host_images: dict[str, HostImage] = field(default_factory=dict)
    host_path_map: dict[str, str] = field(default_factory=dict)
    """Host paths (as pod specs name them) mapped per node to ``<node dir>/host/<value>``."""
    cdi_dirs: tuple[str, ...] = ()
    """Host paths of CDI spec dirs (e.g. ``/var/run/cdi``): fakecri resolves and applies CDI devices
    from each node's copy, and refuses containers whose CDI devices it cannot resolve, as containerd
    does. Empty: CDI device names are only recorded."""
    binaries: Binaries | None = None
    keep_run_dir: bool = True
    node_monitor_grace_seconds: int | None = None
    """How long the node lifecycle controller waits for a silent kubelet before marking its node
    ``Unknown`` (kube-controller-manager's ``--node-monitor-grace-period``; None: its default, 50 s).
    Kubelets then renew their lease four times within it, as with the defaults."""
    network_policy: bool = False
    """Run a NetworkPolicy enforcer (kube-router's firewall, ``localcluster.enforcer``) on every
    containerd node, control plane included; containerd clusters only. Off: policies are stored but
    nothing enforces them, as on a cluster whose network plugin has no policy support."""
    registry: bool = False
    """Run a container registry on the fabric (``localcluster.registry``; containerd clusters only): the
    nodes then pull the project's image from it instead of finding it imported, as an operator's do
    (docs/registry.md). ``LocalCluster.registry_host`` is where to push."""

    nodes: list[Node] = field(default_factory=list, init=False)
    """The nodes of ``nodes_specs`` and ``add_nodes``: the workers."""
    control_plane: Node | None = field(default=None, init=False)
    """The control-plane node (``control_plane_spec``) of a containerd cluster, else None."""
    kubeconfig: Path = field(default=Path(), init=False)
    apiserver_url: str = field(default="", init=False)
    apiserver_port: int = field(default=0, init=False)
    startup_seconds: dict[str, float] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        """Resolve binaries and the run directory (short: unix socket paths are limited to 107 bytes)."""
        self.binaries = self.binaries or locate()
        self.run_dir = self.run_dir or Path(tempfile.mkdtemp(prefix="imx-", dir="/tmp"))
        self._supervisor = Supervisor(self.run_dir / "logs")
        self._node_ip = host_ip()
        self._health: dict[str, Callable[[], bool]] = {}
        self._node_starts: dict[str, Callable[[], None]] = {}
        self._proxy_kubeconfig: Path | None = None
        self._enforcer_kubeconfig: Path | None = None
        if self.network_policy:
            missing = [name for name in enforcer.BINARIES if not self.binaries.path(name).exists()]
            if missing:
                raise ConfigError(
                    f"{', '.join(missing)} missing in {self.binaries.bin_dir}; run `make k8s` first"
                )
        self._fabric_slots = 0
        self.image_registry: Registry | None = None
        """The running registry, if ``registry`` (started with the control plane)."""
        self.fabric: Fabric | None = None
        """The pod network of containerd nodes (docs/node-runtime.md §6); made when the first spec
        given to the cluster is a containerd node, and the apiserver then listens on it."""

    # -- lifecycle -------------------------------------------------------------------------------

    def __enter__(self) -> LocalCluster:
        """Start the cluster; a SIGTERM to this process then stops it too (see ``exit_on_sigterm``)."""
        exit_on_sigterm()
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Stop the cluster."""
        self.stop()

    def start(self) -> None:
        """Bring up the control plane, then the nodes, and wait until every node is Ready."""
        t0 = time.monotonic()
        try:
            self._start_control_plane()
            self.startup_seconds["control_plane"] = time.monotonic() - t0
            if self.fabric is None:
                self.add_nodes(self.nodes_specs)
            else:
                self.control_plane, *workers = self._start_nodes([control_plane_spec(), *self.nodes_specs])
                self.nodes.extend(workers)
                self._install_cluster_dns(self.control_plane)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds["total"] = time.monotonic() - t0
        log.info("cluster ready", run_dir=str(self.run_dir), seconds=round(self.startup_seconds["total"], 1))

    def stop(self) -> None:
        """Stop the nodes, then every other child; unless ``keep_run_dir``, remove the run directory.

        A containerd node's containers outlive its containerd (their shims run in sessions of their
        own), so they are killed with their node. Before the control plane: the apiserver does not
        exit on SIGTERM while pods still hold watches on it, and was killed after 10 s.
        """
        for node in [*self.nodes, *([self.control_plane] if self.control_plane else [])]:
            for process in reversed(node.processes):
                process.stop()
            if node.spec.runtime == "containerd":
                kill_shims(node.cri_socket)
        self._supervisor.stop_all()
        self._remove_cgroups()
        if self.fabric is not None:
            self.fabric.close()
        if not self.keep_run_dir and self.run_dir is not None:
            shutil.rmtree(self.run_dir, ignore_errors=True)

    def _remove_cgroups(self) -> None:
        """Remove the run's cgroups (docs/node-runtime.md §9): killed shims leave their containers' behind."""
        cgroups = [node.cgroup for node in [*self.nodes, self.control_plane] if node and node.cgroup]
        if cgroups and not cgroups[0].remove_run():
            log.warning("cgroups of this run still hold processes", run=str(self.run_dir))

    # -- control plane ---------------------------------------------------------------------------

    def _start_control_plane(self) -> None:
        assert self.run_dir is not None and self.binaries is not None
        pki = self.pki = ClusterPKI(self.run_dir / "pki")
        etcd_port, etcd_peer, api_port = free_port(), free_port(), free_port()
        self.apiserver_port = api_port
        bind_address, advertise_address = "127.0.0.1", self._node_ip
        if self.network_policy and any(spec.runtime != "containerd" for spec in self.nodes_specs):
            raise ClusterStartError(
                "network_policy needs containerd nodes: fakecri pods share the host's network"
            )
        if any(spec.runtime == "containerd" for spec in self.nodes_specs):
            # Pods and containerd nodes live in namespaces of their own: the apiserver listens on the
            # fabric, where they (through kube-proxy's Service rules) and the machine reach it.
            self.fabric = Fabric.create(self._supervisor)
            bind_address = advertise_address = self.fabric.host_ip
            for leftover in remove_stale_runs(self.run_dir.name):
                log.info("removed a dead run's cgroups", path=str(leftover))
        elif self.registry:
            raise ClusterStartError("registry needs containerd nodes: fakecri nodes pull nothing")
        self.apiserver_url = f"https://{bind_address}:{api_port}"
        serving = pki.issue(
            "apiserver",
            common_name="kube-apiserver",
            dns_names=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
            ip_addresses=tuple({"127.0.0.1", KUBERNETES_SERVICE_IP, self._node_ip, bind_address}),
            server=True,
        )
        kubelet_client = pki.issue(
            "apiserver-kubelet-client",
            common_name="kube-apiserver-kubelet-client",
            organizations=("system:masters",),
        )
        admin = pki.issue("admin", common_name="admin", organizations=("system:masters",))
        self.kubeconfig = self._kubeconfig("admin", admin, "admin")
        self.admin_cert = admin

        etcd = self._supervisor.start(
            "etcd",
            [
                str(self.binaries.path("etcd")),
                "--name=local",
                f"--data-dir={self.run_dir / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
                f"--initial-cluster=local=http://127.0.0.1:{etcd_peer}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        self._health["etcd"] = lambda: b'"health":"true"' in http_get(f"http://127.0.0.1:{etcd_port}/health")
        wait_until("etcd health", self._health["etcd"], timeout=30, process=etcd)
        apiserver = self._supervisor.start(
            "kube-apiserver",
            [
                str(self.binaries.path("kube-apiserver")),
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                f"--bind-address={bind_address}",
                f"--secure-port={api_port}",
                f"--advertise-address={advertise_address}",
                f"--tls-cert-file={serving.cert}",
                f"--tls-private-key-file={serving.key}",
                f"--client-ca-file={pki.ca.cert}",
                f"--kubelet-client-certificate={kubelet_client.cert}",
                f"--kubelet-client-key={kubelet_client.key}",
                # Node names do not resolve here; reach kubelets (logs, exec) at their --node-ip.
                "--kubelet-preferred-address-types=InternalIP",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction",
                "--service-account-issuer=https://kubernetes.default.svc",
                f"--service-account-key-file={pki.sa_pub}",
                f"--service-account-signing-key-file={pki.sa_key}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--allow-privileged=true",
                "--profiling=false",
                "--v=1",
            ],
        )
        self._health["kube-apiserver"] = self._apiserver_ready
        wait_until("kube-apiserver /readyz", self._apiserver_ready, timeout=90, process=apiserver)
        if self.registry and self.fabric is not None:
            self.image_registry = start_registry(
                self.fabric.host_ip, self.run_dir / "registry", pki, self.binaries, self._supervisor
            )

        kcm_cert = pki.issue("kube-controller-manager", common_name="system:kube-controller-manager")
        kcm_port = free_port()
        kcm = self._supervisor.start(
            "kube-controller-manager",
            [
                str(self.binaries.path("kube-controller-manager")),
                f"--kubeconfig={self._kubeconfig('kcm', kcm_cert, 'system:kube-controller-manager')}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={kcm_port}",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={pki.sa_key}",
                f"--root-ca-file={pki.ca.cert}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--controllers=*",
                *(
                    [f"--node-monitor-grace-period={self.node_monitor_grace_seconds}s"]
                    if self.node_monitor_grace_seconds
                    else []
                ),
                "--v=1",
            ],
        )
        scheduler_cert = pki.issue("kube-scheduler", common_name="system:kube-scheduler")
        scheduler_port = free_port()
        scheduler = self._supervisor.start(
            "kube-scheduler",
            [
                str(self.binaries.path("kube-scheduler")),
                f"--kubeconfig={self._kubeconfig('scheduler', scheduler_cert, 'system:kube-scheduler')}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={scheduler_port}",
                "--v=1",
            ],
        )
        insecure = insecure_context()
        for name, port, process in (
            ("kube-controller-manager", kcm_port, kcm),
            ("kube-scheduler", scheduler_port, scheduler),
        ):
            self._health[name] = functools.partial(healthz_ok, f"https://127.0.0.1:{port}/healthz", insecure)
            wait_until(f"{name} /healthz", self._health[name], timeout=60, process=process)

    def _kubeconfig(self, name: str, client: CertPair, user: str) -> Path:
        assert self.run_dir is not None
        return write_kubeconfig(
            self.run_dir / f"{name}.kubeconfig",
            server=self.apiserver_url,
            ca=self.pki.ca.cert,
            client=client,
            user=user,
        )

    def _admin_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.pki.ca.cert))
        context.load_cert_chain(str(self.admin_cert.cert), str(self.admin_cert.key))
        return context

    def _apiserver_ready(self) -> bool:
        return http_get(f"{self.apiserver_url}/readyz", self._admin_context()) == b"ok"

    def restart_component(self, name: str, *, down_for: float = 0.0, timeout: float = 90) -> None:
        """SIGKILL a control-plane process and start it again, as a crashed and restarted service.

        ``name`` is ``etcd``, ``kube-apiserver``, ``kube-controller-manager`` or ``kube-scheduler``. The
        process stays down ``down_for`` seconds, then runs again with the same argv (same data dir and
        ports); this returns once it is healthy again (etcd ``/health``, the apiserver ``/readyz``,
        the others ``/healthz``).
        """
        if name not in self._health:
            raise KeyError(f"{name!r} is not a running control-plane component")
        process = next(p for p in self._supervisor.processes if p.name == name)
        process.kill()
        time.sleep(down_for)
        restarted = self._supervisor.restart(process)
        wait_until(f"{name} healthy after a restart", self._health[name], timeout=timeout, process=restarted)

    def component_running(self, name: str) -> bool:
        """Tell whether control-plane process ``name`` runs (not while ``restart_component`` has it down)."""
        return any(p.alive() for p in self._supervisor.processes if p.name == name)

    def start_process(self, name: str, argv: list[str], *, pass_fds: Sequence[int] = ()) -> ManagedProcess:
        """Run an extra cluster process (an add-on such as an operator) under the cluster's supervision."""
        return self._supervisor.start(name, argv, pass_fds=pass_fds)

    # -- nodes -----------------------------------------------------------------------------------

    def add_nodes(self, specs: Iterable[NodeSpec], *, timeout: float = 120) -> list[Node]:
        """Start simulated worker nodes in parallel and wait until all of them are Ready."""
        started = self._start_nodes(specs, timeout=timeout)
        self.nodes.extend(started)
        return started

    def _start_nodes(self, specs: Iterable[NodeSpec], *, timeout: float = 120) -> list[Node]:
        t0 = time.monotonic()
        starts = [self._node_start(spec) for spec in specs]
        ensure_inotify_instances(len(self.nodes) + len(starts))
        # Nodes start concurrently: each one's start is mostly waiting, on its containerd root's copy
        # (localcluster.imagestore) and on its runtime's socket. Leaving the pool waits for every
        # thread, so a failed start (then stop()) never races a node still being started.
        with ThreadPoolExecutor(max_workers=min(len(starts), NODE_START_THREADS) or 1) as pool:
            futures = [pool.submit(start) for _, start in starts]
        for future in futures:
            future.result()
        started = [node for node, _ in starts]
        for node in started:
            self._wait_node_ready(node, timeout)
        if self.network_policy:
            self._start_enforcers(started, timeout)
        if started:
            self.startup_seconds["nodes"] = time.monotonic() - t0
        return started

    def _node_start(self, spec: NodeSpec) -> tuple[Node, Callable[[], None]]:
        """A node not started yet, and the call that starts it.

        Certificates and fabric slots are given here, in spec order, so that files and addresses do
        not depend on which thread runs first.
        """
        assert self.run_dir is not None and self.binaries is not None
        node = new_node(spec, self.run_dir)
        user = f"system:node:{spec.name}"
        cert = self.pki.issue(f"kubelet-{spec.name}", common_name=user, organizations=("system:nodes",))
        kubeconfig = self._kubeconfig(f"kubelet-{spec.name}", cert, user)
        network = self._node_network(spec)
        start = functools.partial(
            start_node,
            node,
            binaries=self.binaries,
            supervisor=self._supervisor,
            kubeconfig=kubeconfig,
            node_ip=network.fabric.node_ip(network.index) if network else self._node_ip,
            host_images=self.host_images,
            host_path_map={
                **{d: node.host_dir / d.lstrip("/") for d in self.cdi_dirs},
                **{k: node.host_dir / v.lstrip("/") for k, v in self.host_path_map.items()},
            },
            cdi_dirs=[node.host_dir / d.lstrip("/") for d in self.cdi_dirs],
            apiserver_port=self.apiserver_port,
            network=network,
            lease_seconds=self.node_monitor_grace_seconds,
        )
        self._node_starts[spec.name] = start
        return node, start

    def _node_network(self, spec: NodeSpec) -> NodeNetwork | None:
        """A containerd node's fabric slot and kube-proxy identity; None for fakecri nodes."""
        if spec.runtime != "containerd":
            return None
        if self.fabric is None:
            raise ClusterStartError(
                f"node {spec.name}: containerd nodes need the cluster's fabric; "
                "start the cluster with at least one containerd node in nodes_specs"
            )
        if self._proxy_kubeconfig is None:
            cert = self.pki.issue("kube-proxy", common_name="system:kube-proxy")
            self._proxy_kubeconfig = self._kubeconfig("kube-proxy", cert, "system:kube-proxy")
        self._fabric_slots += 1
        return NodeNetwork(self.fabric, self._fabric_slots - 1, self._proxy_kubeconfig, self.image_registry)

    def _start_enforcers(self, nodes: list[Node], timeout: float) -> None:
        """Start each Ready node's NetworkPolicy enforcer; wait until each has hooked its chains in."""
        assert self.binaries is not None
        if self._enforcer_kubeconfig is None:
            cert = self.pki.issue("kube-router", common_name=enforcer.USER)
            self._enforcer_kubeconfig = self._kubeconfig("kube-router", cert, enforcer.USER)
            self.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(enforcer.rbac_manifests()))
        started = [
            enforcer.start_enforcer(
                node,
                binaries=self.binaries,
                supervisor=self._supervisor,
                kubeconfig=self._enforcer_kubeconfig,
                service_cidr=SERVICE_CIDR,
            )
            for node in nodes
        ]
        binaries = self.binaries
        for node, process in zip(nodes, started, strict=True):
            wait_until(
                f"{node.name}'s NetworkPolicy enforcer",
                functools.partial(enforcer.enforcing, node, binaries),
                timeout=timeout,
                process=process,
            )

    def _install_cluster_dns(self, control_plane: Node, timeout: float = 90) -> None:
        """Label the control-plane node as kubeadm does, run CoreDNS on it, wait until it answers.

        The role label is set through the API: a kubelet may not give itself ``node-role`` labels.
        """
        t0 = time.monotonic()
        self.kubectl("label", "node", control_plane.name, f"{dns.CONTROL_PLANE_ROLE}=")
        self.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(dns.manifests()))
        self.kubectl(
            "rollout",
            "status",
            "-n",
            dns.NAMESPACE,
            "deployment/coredns",
            f"--timeout={int(timeout)}s",
            timeout=timeout + 10,
        )
        self.startup_seconds["cluster_dns"] = time.monotonic() - t0

    def _wait_node_ready(self, node: Node, timeout: float) -> None:
        """Wait for the node to be Ready; a kubelet that dies while starting is restarted once.

        Real kubelets run under a service manager that restarts them; a rare start-up failure (seen once:
        EXDEV renaming its pod-resources socket) must not fail a whole test session. A second death fails.
        """
        kubelet = node.processes[-1]
        ready = functools.partial(self._node_ready, node.name)
        try:
            wait_until(f"node {node.name} Ready", ready, timeout=timeout, process=kubelet)
            return
        except ClusterStartError as error:
            if kubelet.alive():
                raise
            log.warning("kubelet exited while starting; restarting it once", node=node.name, error=str(error))
        node.processes[-1] = self._supervisor.start(f"{kubelet.name}-restart", kubelet.argv)
        wait_until(f"node {node.name} Ready", ready, timeout=timeout, process=node.processes[-1])

    def lose_node(self, name: str) -> None:
        """Lose worker ``name`` as hardware is lost: every process on it dies at once (``power_off``).

        Its Node object, pods and files stay; the control plane notices only by the kubelet's silence.
        ``restore_node`` brings it back; ``add_nodes`` with a new name adds a replacement instead.
        """
        power_off(self.node(name))

    def restore_node(self, name: str, *, timeout: float = 120) -> Node:
        """Boot a lost worker again: same name, directories, ports and certificates; wait until Ready.

        As after a power loss, its runtime starts empty (fakecri keeps containers in memory), so the
        kubelet runs its pods anew from its own state directory.
        """
        node = self.node(name)
        if node.spec.runtime == "containerd":
            # Its new network namespace would need the fabric's port and routes re-made (Fabric.attach).
            raise ClusterStartError(f"node {name}: bringing back a lost containerd node is not supported")
        if any(p.alive() for p in node.processes):
            raise ClusterStartError(f"node {name} is running; lose_node it first")
        forget_processes(node, self._supervisor)
        self._node_starts[name]()
        self._wait_node_ready(node, timeout)
        return node

    def node(self, name: str) -> Node:
        """Return the running node called ``name``."""
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    def _node_ready(self, name: str) -> bool:
        result = self.kubectl(
            "get", "node", name, "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status}", check=False
        )
        return result.returncode == 0 and result.stdout.strip() == "True"

    # -- clients ---------------------------------------------------------------------------------

    def kubectl(
        self, *args: str, check: bool = True, input: str | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run the cluster's kubectl as cluster admin."""
        assert self.binaries is not None
        result = subprocess.run(
            [str(self.binaries.path("kubectl")), f"--kubeconfig={self.kubeconfig}", *args],
            capture_output=True,
            text=True,
            input=input,
            timeout=timeout,
            check=False,
        )
        if check and result.returncode != 0:
            raise subprocess.CalledProcessError(result.returncode, result.args, result.stdout, result.stderr)
        return result

    def run(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run a helper command (e.g. helm) and raise with its output if it fails."""
        result = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, check=False)
        if result.returncode != 0:
            raise subprocess.CalledProcessError(result.returncode, result.args, result.stdout, result.stderr)
        return result

    def create_namespace(self, name: str, *, timeout: float = 30) -> None:
        """Create a namespace and wait for its ``default`` ServiceAccount (pods need it)."""
        self.kubectl("create", "namespace", name)
        wait_until(
            f"ServiceAccount {name}/default",
            lambda: self.kubectl("get", "serviceaccount", "default", "-n", name, check=False).returncode == 0,
            timeout=timeout,
        )
