"""A simulated GB200 NVL72 rack on the local cluster, with imexdra installed by its Helm chart.

Each node is a real kubelet on fakecri with its own fake hardware: a driver root laid out like an
NVIDIA driver install (docs/driver-root.md) holding the mock NVML library with a GB200 tray profile
(4 GPUs in the rack's NVLink clique, or no fabric) and the fake ``nvidia-imex``/``nvidia-imex-ctl``, a
fake ``/proc/devices`` with the IMEX channel major, a CDI directory, and ``nvidia.com/gpu: 4``. The
chart's pods run as host processes: fakecri maps the image to this virtualenv's console scripts,
rewrites the pods' host paths to the node's own directories and applies the CDI specs' mounts, so a
daemon finds the driver's ``nvidia-imex`` at ``/usr/bin`` as on a real node.

Under HostManagedIMEX every node with an NVLink clique also runs its "host" ``nvidia-imex.service``: the
driver root's (fake) ``nvidia-imex`` as a host process, one IMEX domain per rack, its command socket
at ``hostSocketPath`` (``/etc/imexdra-sim/nvidia-imex/imex_ctrl.sock``, that node's own copy), which the
kubelet plugin checks before preparing a channel. ``stop_host_imex`` / ``start_host_imex`` play
``systemctl stop`` / ``start``. Beside it runs the node's fake fabric (docs/fake-fabric.md), which
decides GPU memory imports by IMEX channel; pods of ``PROBE_IMAGE`` run its GPU program, ``imex-probe``,
asking the fabric at ``fabric_endpoint(node)``.
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

import imexdra
from imexdra.api.constants import DRIVER_NAME
from imexdra_sim.devices import driverroot_fake
from imexdra_sim.devices.fakefabric import service as fabric_service
from imexdra_sim.devices.fakeimex.hostservice import CONFIG_NAME, SOCKET_NAME, HostImexService, service_argv
from imexdra_sim.localcluster.addons import start_mpi_operator
from imexdra_sim.localcluster.binaries import kube_version, locate, nvml_mock_library
from imexdra_sim.localcluster.cluster import LocalCluster
from imexdra_sim.localcluster.machine import GB200_TRAY
from imexdra_sim.localcluster.nodes import GPU_NODE_LABELS, HostImage, Node, NodeSpec
from imexdra_sim.localcluster.processes import ManagedProcess, free_port

IMAGE_REPOSITORY = "imexdra.local/imexdra"
IMAGE_TAG = imexdra.__version__
DRIVER_NAMESPACE = "imexdra"
RELEASE = "imexdra"
SIM_DIR = "/etc/imexdra-sim"
"""Host path of a node's simulated hardware files; fakecri maps it to ``<node>/host/sim``."""
CDI_ROOT = "/var/run/cdi"
HOST_IMEX_DIR = "nvidia-imex"
"""The simulated host's ``/etc/nvidia-imex``, under ``SIM_DIR`` (so fakecri maps it per node)."""
HOST_SOCKET_PATH = f"{SIM_DIR}/{HOST_IMEX_DIR}/{SOCKET_NAME}"
GPUS_PER_NODE = 4
PROBE_IMAGE = f"imexdra.local/imex-probe:{IMAGE_TAG}"
"""The GPU program of the fake fabric: fakecri runs ``imex-probe`` (sim/imexprobe) from the cache."""
CHART = Path(__file__).resolve().parents[3] / "deployments" / "helm" / "imexdra"
RELEASE_SCRIPT = Path(__file__).resolve().parents[3] / "tools" / "release.py"
"""``make release``'s script: racks with a registry publish to it as an operator publishes."""


@dataclass(frozen=True, slots=True)
class RackConfig:
    """Shape of the simulated rack."""

    nodes: int = 4
    host_managed: bool = False
    cluster_uuid: str = "7c9a3e1f-0d2b-4c5e-8f6a-1b2c3d4e5f60"
    clique: int = 32766
    no_fabric_nodes: tuple[int, ...] = ()
    """Indexes of nodes whose NVML reports no NVLink fabric (empty clique ID)."""
    extra_values: Mapping[str, Any] = field(default_factory=dict)
    """Helm values deep-merged over the rack's own (e.g. ``{"controller": {"replicas": 2}}``)."""
    values_files: tuple[Path, ...] = ()
    """Helm values files given before the rack's own values, as an operator passes theirs (e.g. one
    written for upstream's chart): the rack's values still win where both set a key."""
    runtime: Literal["fakecri", "containerd"] = "fakecri"
    """containerd: real containers from the project's image on a pod network (docs/node-runtime.md);
    fakecri: the driver's pods as host processes from this virtualenv."""
    node_monitor_grace_seconds: int | None = None
    """How soon a lost node is marked ``Unknown`` (``LocalCluster.node_monitor_grace_seconds``)."""
    network_policy: bool = False
    """Enforce NetworkPolicies: kube-router's firewall on every node (``LocalCluster.network_policy``;
    containerd racks only)."""
    from_registry: bool = False
    """Install as an operator does (containerd racks only; docs/registry.md): the cluster runs a
    registry, tools/release.py pushes the image index and the chart to it, ``helm install`` takes the
    OCI chart and every node pulls the image by digest (it is not imported)."""

    @property
    def clique_id(self) -> str:
        """The NVLink clique ID NVML reports for the rack's nodes."""
        return f"{self.cluster_uuid}.{self.clique}"


def node_specs(config: RackConfig) -> list[NodeSpec]:
    """Simulated GB200 nodes, labelled as GPU Feature Discovery labels them, each the size of a tray."""
    return [node_spec(config, i) for i in range(config.nodes)]


def node_spec(config: RackConfig, index: int) -> NodeSpec:
    """The rack's ``index``-th node, ``gb200-<index>``; an index past ``config.nodes`` is a spare tray."""
    labels = dict(GPU_NODE_LABELS)
    if index not in config.no_fabric_nodes:
        labels["nvidia.com/gpu.clique"] = config.clique_id
    name = f"gb200-{index:02d}"
    if config.runtime == "containerd":
        return NodeSpec(name=name, labels=labels, runtime="containerd", machine=GB200_TRAY)
    return NodeSpec(name=name, labels=labels, pod_cidr=f"127.100.{index + 1}.0/24", machine=GB200_TRAY)


def new_rack_cluster(config: RackConfig, run_dir: Path | None = None) -> LocalCluster:
    """A not yet started LocalCluster shaped as the rack, running imexdra images as host processes."""
    venv_bin = Path(sys.executable).parent
    run_dir = run_dir or Path(tempfile.mkdtemp(prefix="imx-", dir="/tmp"))
    # The image holds imexdra's programs only: a daemon gets nvidia-imex from the node's driver root,
    # through the base CDI spec's mounts, which fakecri applies in the container's mount namespace.
    image = HostImage(path=(str(venv_bin),))
    return LocalCluster(
        nodes_specs=node_specs(config),
        run_dir=run_dir,
        host_images={
            f"{IMAGE_REPOSITORY}:{IMAGE_TAG}": image,
            PROBE_IMAGE: HostImage(path=(str(locate().bin_dir),)),
        },
        host_path_map={SIM_DIR: "sim"},
        cdi_dirs=(CDI_ROOT,),
        node_monitor_grace_seconds=config.node_monitor_grace_seconds,
        network_policy=config.network_policy,
        registry=config.from_registry,
    )


def write_node_hardware(node: Node, config: RackConfig, index: int) -> None:
    """Write the node's driver root and ``/proc/devices`` under its simulated host paths."""
    fabric = (
        None
        if index in config.no_fabric_nodes
        else driverroot_fake.Fabric(config.cluster_uuid, config.clique)
    )
    tray = driverroot_fake.Tray(name=node.name, fabric=fabric, gpus=GPUS_PER_NODE)
    driverroot_fake.write_node_hardware(node.host_dir / "sim", tray, nvml_library=nvml_mock_library())


def create_host_placeholders() -> None:
    """Create empty stand-ins of the simulated host paths on the real host.

    The kubelet checks a hostPath volume's type (``Directory``, ``File``) on the real host before the
    pod starts; fakecri then mounts each node's own copy instead, so only the kind matters here.
    """
    sim = Path(SIM_DIR)
    (sim / "driver-root").mkdir(parents=True, exist_ok=True)
    (sim / HOST_IMEX_DIR).mkdir(parents=True, exist_ok=True)
    (sim / "proc-devices").touch(exist_ok=True)


def host_imex_service(node: Node, index: int, addresses: list[str], server_port: int) -> HostImexService:
    """The host IMEX of the rack's ``index``-th node, in its copy of ``/etc/imexdra-sim/nvidia-imex``."""
    directory = node.host_dir / "sim" / HOST_IMEX_DIR
    return HostImexService(
        directory=directory,
        address=_host_imex_address(index),
        peers=addresses,
        server_port=server_port,
        socket=directory / SOCKET_NAME,
    )


def _host_imex_address(index: int) -> str:
    # In the node's loopback pod range, above any pod IP fakecri hands out there.
    return f"127.100.{index + 1}.254"


def setup_host_imex(cluster: LocalCluster, config: RackConfig) -> None:
    """Configure and start the host IMEX of every node with an NVLink clique (one IMEX domain)."""
    members = [i for i in range(config.nodes) if i not in config.no_fabric_nodes]
    addresses = [_host_imex_address(i) for i in members]
    port = free_port()
    fabric_port = free_port()  # not a fixed port: two racks (a demo beside the tests) may run at once
    fabrics = {cluster.nodes[i].name: (_host_imex_address(i), fabric_port) for i in members}
    for i in members:
        node = cluster.nodes[i]
        host_imex_service(node, i, addresses, port).write()
        start_host_imex(cluster, node)
        proc_devices = node.host_dir / "sim" / "proc-devices"
        domain = {name: address for name, address in fabrics.items() if name != node.name}
        fabric = fabric_service.FabricService(node.name, fabrics[node.name], domain, proc_devices)
        fabric.write(_fabric_config(node))
        start_fabric(cluster, node)


def _fabric_config(node: Node) -> Path:
    return node.host_dir / "sim" / fabric_service.CONFIG_NAME


def start_fabric(cluster: LocalCluster, node: Node) -> ManagedProcess:
    """Start ``node``'s fake fabric (its config written by ``setup_host_imex``)."""
    argv = fabric_service.service_argv(_fabric_config(node))
    return _start_node_process(cluster, node, _fabric_name(node), argv)


def fabric_endpoint(node: Node) -> str:
    """``host:port`` of ``node``'s fake fabric, for ``imex-probe --fabric``."""
    return fabric_service.FabricService.read(_fabric_config(node)).endpoint


def _fabric_name(node: Node) -> str:
    return f"{node.name}-fake-fabric"


def _host_imex_name(node: Node) -> str:
    return f"{node.name}-host-nvidia-imex"


def start_host_imex(cluster: LocalCluster, node: Node) -> ManagedProcess:
    """``systemctl start nvidia-imex`` on ``node``: its driver-root nvidia-imex with the config written."""
    sim = node.host_dir / "sim"
    argv = service_argv(sim / HOST_IMEX_DIR / CONFIG_NAME, sim / "driver-root")
    return _start_node_process(cluster, node, _host_imex_name(node), argv)


def _start_node_process(cluster: LocalCluster, node: Node, name: str, argv: list[str]) -> ManagedProcess:
    process = cluster.start_process(name, argv)
    node.processes.append(process)  # a node process: it goes when the node goes
    return process


def _running(node: Node, name: str) -> bool:
    return any(p.name == name and p.alive() for p in node.processes)


def ensure_host_imex(cluster: LocalCluster, node: Node) -> None:
    """Start ``node``'s host IMEX and fabric if they are configured and not running."""
    configured = (node.host_dir / "sim" / HOST_IMEX_DIR / CONFIG_NAME).exists()
    if configured and not _running(node, _host_imex_name(node)):
        start_host_imex(cluster, node)
    if _fabric_config(node).exists() and not _running(node, _fabric_name(node)):
        start_fabric(cluster, node)


def stop_host_imex(node: Node) -> None:
    """``systemctl stop nvidia-imex`` on ``node`` (no-op when it is not running)."""
    for process in node.processes:
        if process.name == _host_imex_name(node):
            process.stop()


def advertise_gpus(cluster: LocalCluster, node: Node) -> None:
    """Give the node ``nvidia.com/gpu: 4`` (an extended resource, as the GPU device plugin would)."""
    patch = {"status": {"capacity": {"nvidia.com/gpu": str(GPUS_PER_NODE)}}}
    cluster.kubectl(
        "patch", "node", node.name, "--subresource=status", "--type=merge", "-p", json.dumps(patch)
    )


def restore_node(cluster: LocalCluster, name: str) -> Node:
    """Power a lost tray back on (``LocalCluster.restore_node``) and start its host services again.

    Its hardware files survived (they are its disk); its host IMEX, if configured, starts at boot as
    ``nvidia-imex.service`` would, and the GPUs are advertised again.
    """
    node = cluster.restore_node(name)
    advertise_gpus(cluster, node)
    ensure_host_imex(cluster, node)
    return node


def add_spare_node(cluster: LocalCluster, config: RackConfig, index: int) -> Node:
    """Slot a fresh tray ``gb200-<index>`` into the rack (driver-managed racks): start it, give it hardware.

    Host-managed racks would also need its host IMEX in every node's ``nodes_config.cfg``; not done yet.
    """
    if config.host_managed:
        raise NotImplementedError("a spare tray's host IMEX would need every node's IMEX config rewritten")
    spec = node_spec(config, index)
    assert cluster.run_dir is not None
    # Its hardware is in place before it boots: the kubelet plugin reads it as soon as it starts there.
    unstarted = Node(spec=spec, directory=cluster.run_dir / spec.name, kubelet_port=0, healthz_port=0)
    write_node_hardware(unstarted, config, index)
    (node,) = cluster.add_nodes([spec])
    advertise_gpus(cluster, node)
    return node


def chart_values(config: RackConfig) -> dict[str, Any]:
    """Helm values for the simulated rack (a ComputeDomain-only install), with ``extra_values`` merged in."""
    # containerd nodes run the chart's image: its default, which tools/image/build.sh builds and every
    # node imports, or the released one the OCI chart names; fakecri runs this virtualenv's programs
    # for an image name of its own.
    values: dict[str, Any] = {
        **(
            {}
            if config.runtime == "containerd"
            else {"image": {"repository": IMAGE_REPOSITORY, "tag": IMAGE_TAG, "pullPolicy": "IfNotPresent"}}
        ),
        "resources": {"gpus": {"enabled": False}, "computeDomains": {"enabled": True}},
        "featureGates": {"HostManagedIMEX": config.host_managed},
        "nvidiaDriverRoot": f"{SIM_DIR}/driver-root",
        "altProcDevices": f"{SIM_DIR}/proc-devices",
        # Host-process pods share the host's network namespace: bind servers to each pod's own IP, and
        # keep clear of :8080, where the MPI Operator (a host process here) hard-codes its health server.
        "controller": {"leaderElection": {"enabled": True}, "metrics": {"httpEndpoint": "$(POD_IP):8090"}},
        "kubeletPlugin": {"metrics": {"computeDomainHttpEndpoint": "$(POD_IP):8081"}},
    }
    if config.host_managed:
        values["resources"]["computeDomains"]["imex"] = {"hostSocketPath": HOST_SOCKET_PATH}
    return _deep_merge(values, config.extra_values)


def _deep_merge(base: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``extra`` merged in: mappings merge key by key, anything else replaces (as Helm)."""
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def install_chart(cluster: LocalCluster, config: RackConfig, chart: Sequence[str] = ()) -> None:
    """``helm install`` the imexdra chart into the driver namespace and wait for it.

    ``chart``: what to install (``release_chart``); by default the repo's chart, or on a rack with a
    registry (``from_registry``) the OCI chart ``publish_release`` pushed there (published first if it
    was not), as an operator installs a release.
    """
    if not chart and cluster.image_registry is not None:
        if not _release_record(cluster).exists():
            publish_release(cluster)
        chart = release_chart(cluster)
    _helm(cluster, "install", "--create-namespace", *_values_files(cluster, config), chart=chart)


def reinstall_values(cluster: LocalCluster, config: RackConfig) -> None:
    """``helm upgrade --reset-values`` the rack's release to ``config``'s values; wait for it.

    The release then runs as ``install_chart(cluster, config)`` would have left it: the chart's
    defaults, ``config.values_files``, the rack's own values — nothing of the values before.
    """
    _helm(cluster, "upgrade", "--reset-values", *_values_files(cluster, config))


def release_revision(cluster: LocalCluster) -> int:
    """The revision of the rack's release (helm's newest release record; 0 when none)."""
    listed = cluster.kubectl(
        "get",
        "secrets",
        "-n",
        DRIVER_NAMESPACE,
        "-l",
        f"owner=helm,name={RELEASE}",
        "-o",
        "jsonpath={.items[*].metadata.labels.version}",
    ).stdout.split()
    return max((int(version) for version in listed), default=0)


def _values_files(cluster: LocalCluster, config: RackConfig) -> list[str]:
    """The ``--values`` options of ``config``: its values files, then the rack's own values (they win)."""
    assert cluster.run_dir is not None
    values = cluster.run_dir / "imexdra-values.yaml"
    values.write_text(yaml.safe_dump(chart_values(config)))
    return [*(f"--values={path}" for path in config.values_files), f"--values={values}"]


def upgrade_chart(cluster: LocalCluster, values: Mapping[str, Any], chart: Sequence[str] = ()) -> None:
    """``helm upgrade --reset-then-reuse-values`` the rack's release with ``values`` on top; wait for it.

    ``chart`` as for ``install_chart``: by default the rack's own (the repo's, or its registry's).
    ``--reuse-values`` would keep the *old chart's* defaults too (a new release's image among them);
    this flag takes the new chart's defaults and the user's values (docs/registry.md §2).
    """
    assert cluster.run_dir is not None
    path = cluster.run_dir / "imexdra-upgrade-values.yaml"
    path.write_text(yaml.safe_dump(dict(values)))
    _helm(cluster, "upgrade", "--reset-then-reuse-values", f"--values={path}", chart=chart)


def publish_release(
    cluster: LocalCluster, *, archive: Path | None = None, chart_dir: Path = CHART, prefix: str = ""
) -> dict[str, str]:
    """Push an image index and its chart to the cluster's registry with tools/release.py.

    By default this tree's (the archive ``make image`` built, the repo's chart); ``archive`` and
    ``chart_dir`` of another checkout publish that one, under ``<registry>/<prefix>``. Returns the
    record (``image``: the pinned reference; ``chart``; ``version``). The tree may be uncommitted (a
    test run's): ``--allow-dirty``.
    """
    assert cluster.image_registry is not None
    registry = cluster.image_registry
    cluster.run(
        sys.executable,
        str(RELEASE_SCRIPT),
        f"--registry={registry.host}/{prefix}" if prefix else f"--registry={registry.host}",
        f"--ca-file={registry.ca}",
        f"--chart={chart_dir}",
        *([f"--archive={archive}"] if archive else []),
        "--allow-dirty",
        f"--record={_release_record(cluster, prefix)}",
    )
    return published_release(cluster, prefix)


def published_release(cluster: LocalCluster, prefix: str = "") -> dict[str, str]:
    """The record of what ``publish_release`` pushed to the cluster's registry (tools/release.py's)."""
    published: dict[str, str] = json.loads(_release_record(cluster, prefix).read_text())
    return published


def release_chart(cluster: LocalCluster, record: Mapping[str, str] | None = None) -> list[str]:
    """Helm's chart arguments for a published release: ``record``, or this tree's (published before)."""
    assert cluster.image_registry is not None
    record = record or published_release(cluster)
    return [record["chart"], f"--version={record['version']}", f"--ca-file={cluster.image_registry.ca}"]


def _release_record(cluster: LocalCluster, prefix: str = "") -> Path:
    assert cluster.run_dir is not None
    return cluster.run_dir / (f"release-{prefix}.json" if prefix else "release.json")


def _helm(cluster: LocalCluster, verb: str, *options: str, chart: Sequence[str] = ()) -> None:
    """``helm <verb>`` of the rack's release with ``options`` (its ``--values`` last: they win); wait for it.

    ``chart``: helm's chart arguments; by default the rack's own chart (the repo's, or its registry's).
    """
    assert cluster.binaries is not None
    if not chart:
        chart = release_chart(cluster) if cluster.image_registry is not None else [str(CHART)]
    cluster.run(
        str(cluster.binaries.path("helm")),
        verb,
        RELEASE,
        *chart,
        f"--kubeconfig={cluster.kubeconfig}",
        f"--namespace={DRIVER_NAMESPACE}",
        *options,
        "--wait",
        "--timeout=180s",
        timeout=240,
    )


def slices_follow_gate(cluster: LocalCluster, binding_conditions: bool) -> bool:
    """Whether every node's slice marks its channel devices with binding conditions iff they are on.

    That is gate ComputeDomainBindingConditions as the plugins run it. ``helm install/upgrade --wait``
    can return before a (restarted) plugin has published: a claim allocated meanwhile comes from no
    slice or the old one.
    """
    listed = json.loads(cluster.kubectl("get", "resourceslices", "-o", "json", timeout=60).stdout)["items"]
    slices = [s for s in listed if s["spec"]["driver"] == DRIVER_NAME]
    channels = [d for s in slices for d in s["spec"].get("devices", []) if d["name"].startswith("channel-")]
    marked = all(("bindingConditions" in d) is binding_conditions for d in channels)
    return len(slices) == len(cluster.nodes) and marked


def bring_up(
    cluster: LocalCluster,
    config: RackConfig,
    step: Callable[[str], AbstractContextManager[None]] = lambda _title: nullcontext(),
    install: Callable[[LocalCluster], None] | None = None,
) -> None:
    """Start the cluster, give every node its hardware, run the MPI Operator and install imexdra.

    ``step`` wraps each phase (the demo prints progress with it; tests pass nothing). ``install``
    replaces the last phase (publishing this tree's release and installing it), e.g. to install an
    earlier release.
    """
    with step(f"start Kubernetes v{kube_version()} control plane and {config.nodes} kubelets"):
        cluster.start()
        create_host_placeholders()
        for index, node in enumerate(cluster.nodes):
            write_node_hardware(node, config, index)
            advertise_gpus(cluster, node)
        if config.host_managed:
            setup_host_imex(cluster, config)
    with step("start the Kubeflow MPI Operator"):
        start_mpi_operator(cluster)
    if install is not None:
        with step("install imexdra (the caller's release)"):
            install(cluster)
        return
    chart = str(CHART)
    if cluster.image_registry is not None:
        with step(f"make release REGISTRY={cluster.image_registry.host} (image index + OCI chart)"):
            chart = publish_release(cluster)["chart"]
    with step(f"helm install imexdra {chart} (controller + kubelet plugin as pods)"):
        install_chart(cluster, config)
