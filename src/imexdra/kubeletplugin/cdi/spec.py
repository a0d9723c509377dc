"""CDI specs for IMEX claims, built as pure data (docs/data-path.md §8, docs/compatibility.md §2.6).

Owns the CDI data model, the container edits of channel and daemon devices, the base and per-claim
specs, upstream's normalisation (dedupe, sort by path depth then path), the driver-root transform,
the minimum ``cdiVersion``, the CDI library's validation rules, and the CDI device IDs handed to
the kubelet. No I/O here: ``cdi.files`` renders and writes the files.

Names: vendor ``k8s.compute-domain.nvidia.com``; the base spec has class ``device`` with one device
``all`` (every NVIDIA device node) and, at spec level, the driver's ``nvidia-imex``/``nvidia-imex-ctl``
mounted read-only at ``/usr/bin`` when the driver root has them (docs/driver-root.md); a claim spec has
class ``claim`` and one device ``<claimUID>-<deviceName>`` per prepared device whose group has edits.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from imexdra.common.errors import RetryableError
from imexdra.devices.procfs import CharDevice

CDI_VENDOR = "k8s.compute-domain.nvidia.com"
BASE_CLASS = "device"
CLAIM_CLASS = "claim"
BASE_KIND = f"{CDI_VENDOR}/{BASE_CLASS}"
CLAIM_KIND = f"{CDI_VENDOR}/{CLAIM_CLASS}"
BASE_DEVICE_NAME = "all"
BASE_SPEC_ID = "base"
DAEMON_MOUNT_PATH = "/imexd"
DAEMON_MOUNT_OPTIONS = ("rw", "nosuid", "nodev", "bind")
#: Where the base spec puts the driver's programs in a container, and how (as the NVIDIA container
#: toolkit mounts driver binaries: read-only, no setuid, no devices).
DRIVER_BINARY_DIR = "/usr/bin"
DRIVER_BINARY_MOUNT_OPTIONS = ("ro", "nosuid", "nodev", "bind")

_T = TypeVar("_T")
_KIND_PART = re.compile(r"[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?")
_DEVICE_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?")
_HOOK_NAMES = frozenset(
    {"prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"}
)


class CdiSpecError(RetryableError):
    """A spec the CDI library would refuse to write (upstream: a retryable prepare error)."""


@dataclass(frozen=True, slots=True)
class DeviceNode:
    """A device node edit; zero/empty fields are omitted from the file."""

    path: str
    host_path: str = ""
    type: str = ""
    major: int = 0
    minor: int = 0
    file_mode: int | None = None
    permissions: str = ""


@dataclass(frozen=True, slots=True)
class Mount:
    """A bind (or typed) mount edit."""

    host_path: str
    container_path: str
    options: tuple[str, ...] = ()
    type: str = ""


@dataclass(frozen=True, slots=True)
class Hook:
    """An OCI hook edit."""

    hook_name: str
    path: str
    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    timeout: int | None = None


@dataclass(frozen=True, slots=True)
class ContainerEdits:
    """Edits applied to a container, in the CDI field order env, deviceNodes, hooks, mounts."""

    env: tuple[str, ...] = ()
    device_nodes: tuple[DeviceNode, ...] = ()
    hooks: tuple[Hook, ...] = ()
    mounts: tuple[Mount, ...] = ()

    def is_empty(self) -> bool:
        """Whether there is nothing to apply."""
        return not (self.env or self.device_nodes or self.hooks or self.mounts)

    def merged(self, other: ContainerEdits) -> ContainerEdits:
        """These edits followed by ``other``'s."""
        return ContainerEdits(
            env=self.env + other.env,
            device_nodes=self.device_nodes + other.device_nodes,
            hooks=self.hooks + other.hooks,
            mounts=self.mounts + other.mounts,
        )


@dataclass(frozen=True, slots=True)
class CdiDevice:
    """A named CDI device (a spec entry; the kubelet-facing prepared device is ``dra.driver.Device``)."""

    name: str
    container_edits: ContainerEdits


@dataclass(frozen=True, slots=True)
class Spec:
    """A CDI spec file's content; ``cdi_version`` is set by the builders to the minimum required."""

    kind: str
    devices: tuple[CdiDevice, ...]
    container_edits: ContainerEdits = field(default_factory=ContainerEdits)
    cdi_version: str = "0.3.0"


# --- device IDs --------------------------------------------------------------------------------


def base_device_id() -> str:
    """``k8s.compute-domain.nvidia.com/device=all``: management access to all NVIDIA devices."""
    return f"{BASE_KIND}={BASE_DEVICE_NAME}"


def claim_device_name(claim_uid: str, device_name: str) -> str:
    """The CDI device name of a claim's device, ``<claimUID>-<deviceName>``."""
    return f"{claim_uid}-{device_name}"


def claim_device_id(claim_uid: str, device_name: str) -> str:
    """``k8s.compute-domain.nvidia.com/claim=<claimUID>-<deviceName>``."""
    return f"{CLAIM_KIND}={claim_device_name(claim_uid, device_name)}"


# --- container edits ---------------------------------------------------------------------------


def char_device_node(device: CharDevice) -> DeviceNode:
    """A CDI char device node for ``device`` (no hostPath: the root transform adds it)."""
    return DeviceNode(
        path=device.path, type="c", major=device.major, minor=device.minor, file_mode=device.file_mode
    )


def channel_edits(channels: Iterable[CharDevice]) -> ContainerEdits:
    """Edits giving a container the IMEX channel device nodes."""
    return ContainerEdits(device_nodes=tuple(char_device_node(channel) for channel in channels))


def driver_binary_mounts(binaries: Mapping[str, Path]) -> tuple[Mount, ...]:
    """Read-only bind mounts of driver programs (``name -> file under the container driver root``).

    Each lands at ``/usr/bin/<name>``, where the compute-domain daemon looks first; the root transform
    later moves the host path under the host driver root.
    """
    return tuple(
        Mount(str(path), posixpath.join(DRIVER_BINARY_DIR, name), DRIVER_BINARY_MOUNT_OPTIONS)
        for name, path in sorted(binaries.items())
    )


def daemon_edits(
    *,
    clique_id: str,
    domain_uid: str,
    domain_name: str,
    domain_namespace: str,
    domain_dir: Path,
    fabric_mgmt: CharDevice | None,
) -> ContainerEdits:
    """Edits for the IMEX daemon: its environment, its ``/imexd`` dir, and fabric management access.

    ``CLIQUE_ID`` is set even when empty (non-fabric node); ``fabric_mgmt`` is given only with a clique.
    """
    return ContainerEdits(
        env=(
            f"CLIQUE_ID={clique_id}",
            f"COMPUTE_DOMAIN_UUID={domain_uid}",
            f"COMPUTE_DOMAIN_NAME={domain_name}",
            f"COMPUTE_DOMAIN_NAMESPACE={domain_namespace}",
        ),
        device_nodes=(char_device_node(fabric_mgmt),) if fabric_mgmt is not None else (),
        mounts=(Mount(str(domain_dir), DAEMON_MOUNT_PATH, DAEMON_MOUNT_OPTIONS),),
    )


# --- specs -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DriverRoots:
    """Where the driver install is inside the plugin container and on the host."""

    container: str = "/driver-root"
    host: str = "/"


def claim_spec(claim_uid: str, devices: Sequence[tuple[str, ContainerEdits]], *, roots: DriverRoots) -> Spec:
    """The per-claim spec: one device per ``(device name, group edits)`` pair.

    Raises:
        CdiSpecError: the result would fail CDI validation (e.g. no devices, a bad UID).

    """
    built = tuple(CdiDevice(claim_device_name(claim_uid, name), edits) for name, edits in devices)
    return finish(Spec(kind=CLAIM_KIND, devices=built), roots=roots)


def base_spec(
    device_nodes: Sequence[tuple[str, Path]],
    *,
    roots: DriverRoots,
    spec_edits: ContainerEdits | None = None,
) -> Spec:
    """The base spec: device ``all`` with every NVIDIA device node, plus ``spec_edits`` at spec level.

    ``device_nodes`` are ``(container path, host file)`` pairs (``devnodes.nvidia_device_nodes``).
    ``NVIDIA_VISIBLE_DEVICES=void`` is always appended to the spec-level environment.
    """
    nodes = tuple(DeviceNode(path=path, host_path=str(host)) for path, host in device_nodes)
    spec_level = (spec_edits or ContainerEdits()).merged(ContainerEdits(env=("NVIDIA_VISIBLE_DEVICES=void",)))
    spec = Spec(
        kind=BASE_KIND,
        devices=(CdiDevice(BASE_DEVICE_NAME, ContainerEdits(device_nodes=nodes)),),
        container_edits=spec_level,
    )
    return finish(spec, roots=roots)


def finish(spec: Spec, *, roots: DriverRoots) -> Spec:
    """Transform roots, normalise, set the minimum cdiVersion and validate, as upstream does."""
    spec = normalize(transform_roots(spec, roots))
    spec = dataclasses.replace(spec, cdi_version=minimum_version(spec))
    validate(spec)
    return spec


def transform_roots(spec: Spec, roots: DriverRoots) -> Spec:
    """Rewrite container-root paths to host-root paths (a no-op when the roots are equal).

    Every device node gets ``hostPath = path`` when unset; device-node and mount host paths that start
    with the container root are moved under the host root.
    """
    if roots.container == roots.host:
        return spec

    def host(path: str) -> str:
        prefix = roots.container.rstrip("/")
        if prefix and path.startswith(prefix):
            return posixpath.join(roots.host, path[len(prefix) :].lstrip("/"))
        return path

    def edits(ce: ContainerEdits) -> ContainerEdits:
        return dataclasses.replace(
            ce,
            device_nodes=tuple(
                dataclasses.replace(n, host_path=host(n.host_path or n.path)) for n in ce.device_nodes
            ),
            mounts=tuple(dataclasses.replace(m, host_path=host(m.host_path)) for m in ce.mounts),
        )

    return dataclasses.replace(
        spec,
        devices=tuple(dataclasses.replace(d, container_edits=edits(d.container_edits)) for d in spec.devices),
        container_edits=edits(spec.container_edits),
    )


def normalize(spec: Spec) -> Spec:
    """Dedupe edits, drop device edits repeated at spec level, sort devices, nodes and mounts."""
    spec_level = _tidy(spec.container_edits)
    devices = []
    for device in sorted(spec.devices, key=lambda d: d.name):
        edits = _tidy(device.container_edits)
        trimmed = ContainerEdits(
            env=tuple(e for e in edits.env if e not in spec_level.env),
            device_nodes=tuple(n for n in edits.device_nodes if n not in spec_level.device_nodes),
            hooks=tuple(h for h in edits.hooks if h not in spec_level.hooks),
            mounts=tuple(m for m in edits.mounts if m not in spec_level.mounts),
        )
        devices.append(CdiDevice(device.name, edits if trimmed.is_empty() else trimmed))
    return dataclasses.replace(spec, devices=tuple(devices), container_edits=spec_level)


def _tidy(edits: ContainerEdits) -> ContainerEdits:
    return ContainerEdits(
        env=_unique(edits.env),
        device_nodes=tuple(sorted(_unique(edits.device_nodes), key=lambda n: _path_key(n.path))),
        hooks=_unique(edits.hooks),
        mounts=tuple(sorted(_unique(edits.mounts), key=lambda m: _path_key(m.container_path))),
    )


def _unique(items: Iterable[_T]) -> tuple[_T, ...]:
    return tuple(dict.fromkeys(items))


def _path_key(path: str) -> tuple[int, str]:
    cleaned = posixpath.normpath(path)
    return (cleaned.count("/"), cleaned)


def minimum_version(spec: Spec) -> str:
    """The lowest cdiVersion that can express ``spec`` (docs/compatibility.md §2.6)."""
    all_edits = [spec.container_edits, *(d.container_edits for d in spec.devices)]
    needs = ["0.3.0"]
    if any(m.type for e in all_edits for m in e.mounts):
        needs.append("0.4.0")
    if any(d.name[:1].isdigit() for d in spec.devices) or any(
        n.host_path for e in all_edits for n in e.device_nodes
    ):
        needs.append("0.5.0")
    if "." in spec.kind.partition("/")[2]:
        needs.append("0.6.0")
    return needs[-1]


def validate(spec: Spec) -> None:
    """Apply the CDI library's write-time validation.

    Raises:
        CdiSpecError: naming the first rule the spec breaks.

    """
    vendor, _, cdi_class = spec.kind.partition("/")
    if not (_KIND_PART.fullmatch(vendor) and _KIND_PART.fullmatch(cdi_class)):
        raise CdiSpecError(f"invalid CDI kind {spec.kind!r}")
    if not spec.devices:
        raise CdiSpecError(f"CDI spec {spec.kind} has no devices")
    names = [device.name for device in spec.devices]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise CdiSpecError(f"CDI spec {spec.kind} has duplicate devices {duplicates}")
    _validate_edits(spec.container_edits, where=spec.kind)
    for device in spec.devices:
        if not _DEVICE_NAME.fullmatch(device.name):
            raise CdiSpecError(f"invalid CDI device name {device.name!r}")
        if device.container_edits.is_empty():
            raise CdiSpecError(f"CDI device {device.name!r} has no container edits")
        _validate_edits(device.container_edits, where=device.name)


def _validate_edits(edits: ContainerEdits, *, where: str) -> None:
    for env in edits.env:
        if env.find("=") <= 0:
            raise CdiSpecError(f"{where}: invalid environment variable {env!r}")
    for node in edits.device_nodes:
        if not node.path:
            raise CdiSpecError(f"{where}: device node without a path")
        if node.type not in ("", "b", "c", "u", "p"):
            raise CdiSpecError(f"{where}: device node {node.path} has invalid type {node.type!r}")
        if set(node.permissions) - set("rwm"):
            raise CdiSpecError(
                f"{where}: device node {node.path} has invalid permissions {node.permissions!r}"
            )
    for hook in edits.hooks:
        if hook.hook_name not in _HOOK_NAMES or not hook.path:
            raise CdiSpecError(f"{where}: invalid hook {hook.hook_name!r} at {hook.path!r}")
        if any(env.find("=") <= 0 for env in hook.env):
            raise CdiSpecError(f"{where}: hook {hook.hook_name} has an invalid environment variable")
    for mount in edits.mounts:
        if not mount.host_path or not mount.container_path:
            raise CdiSpecError(
                f"{where}: mount with an empty path ({mount.host_path!r} -> {mount.container_path!r})"
            )
