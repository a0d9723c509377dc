"""Builders and stand-ins for the prepare/unprepare unit tests.

The hardware boundary is the real ``HostImexDevices`` reading fake procfs files; the checkpoint and CDI
files are real files under ``tmp_path``. Only the API-facing seams of ``configs.apply`` (domain lookup,
node labels, daemon readiness, daemon claim owners) and the host IMEX readiness check (tested on its own
in tests/unit/devices/test_hostimex.py) are replaced, by recorders whose answers a test sets.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from imexdra.api.imexmode import DRIVER_MANAGED_IMEX, ImexManagement
from imexdra.common.errors import PermanentError, RetryableError
from imexdra.devices.hostimex import HostImexNotReadyError
from imexdra.devices.procfs import HostImexDevices
from imexdra.dra.resourceclaim import (
    ClaimRef,
    ResourceClaim,
    ResourceClaimStatus,
    parse_claim,
    resource_claim,
)
from imexdra.kubeletplugin.cdi.spec import DriverRoots
from imexdra.kubeletplugin.checkpoint.store import CheckpointStore
from imexdra.kubeletplugin.configs.apply import ConfigApplier, DomainInfo
from imexdra.kubeletplugin.devicestate import DeviceState
from imexdra.kubeletplugin.paths import PluginPaths
from imexdra.kubeletplugin.slices import allocatable_devices
from imexdra_sim.devices.procfs_fake import write_fabric_mgmt_capability, write_proc_devices

DRIVER = "compute-domain.nvidia.com"
NODE = "node-a"
NAMESPACE = "team-a"
DOMAIN_UID = "5f0c2c7e-aaaa-bbbb-cccc-0123456789ab"
OTHER_DOMAIN_UID = "6a1d3d8f-aaaa-bbbb-cccc-0123456789ab"
CLIQUE = "7c9a3e1f-0d2b-4c5e-8f6a-1b2c3d4e5f60.32766"
BOOT_ID = "3f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"
API_VERSION = "resource.nvidia.com/v1beta1"


def channel_params(domain: str = DOMAIN_UID, mode: str | None = "Single", **extra: Any) -> dict[str, Any]:
    params: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "ComputeDomainChannelConfig",
        "domainID": domain,
    }
    if mode is not None:
        params["allocationMode"] = mode
    return {**params, **extra}


def daemon_params(domain: str = DOMAIN_UID) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "ComputeDomainDaemonConfig", "domainID": domain}


def result(request: str, device: str, *, driver: str = DRIVER, admin: bool | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"request": request, "driver": driver, "pool": NODE, "device": device}
    if admin is not None:
        entry["adminAccess"] = admin
    return entry


def config(
    params: Mapping[str, Any] | str,
    *,
    requests: Sequence[str] = (),
    source: str = "FromClaim",
    driver: str = DRIVER,
) -> dict[str, Any]:
    entry: dict[str, Any] = {"source": source, "opaque": {"driver": driver, "parameters": params}}
    if requests:
        entry["requests"] = list(requests)
    return entry


def status(results: Sequence[Mapping[str, Any]], configs: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    devices: dict[str, Any] = {"results": list(results)}
    if configs:
        devices["config"] = list(configs)
    return {"allocation": {"devices": devices}}


def typed(raw: object) -> ResourceClaimStatus:
    """A raw status decoded as the plugin's edge decodes it (``resourceclaim``)."""
    return resource_claim(ClaimRef(NAMESPACE, "claim", "claim-uid"), raw).status


def channel_claim(
    uid: str = "claim-1", *, params: Mapping[str, Any] | str | None = None, namespace: str = NAMESPACE
) -> ResourceClaim:
    """A workload claim as the controller's template renders it: request ``channel`` on channel-0."""
    cfg = channel_params() if params is None else params
    return resource_claim(
        ClaimRef(namespace, f"{uid}-name", uid),
        status([result("channel", "channel-0")], [config(cfg, requests=["channel"])]),
    )


def claim_on(
    device: str, uid: str = "claim-1", *, domain: str = DOMAIN_UID, mode: str | None = "Single"
) -> ResourceClaim:
    """A workload claim of ``domain`` allocated ``device`` (e.g. ``channel-7``) for request ``channel``."""
    return resource_claim(
        ClaimRef(NAMESPACE, f"{uid}-name", uid),
        status([result("channel", device)], [config(channel_params(domain, mode), requests=["channel"])]),
    )


def daemon_claim(uid: str = "daemon-1", *, domain: str = DOMAIN_UID) -> ResourceClaim:
    return resource_claim(
        ClaimRef("driver-ns", f"{uid}-name", uid),
        status([result("daemon", "daemon-0")], [config(daemon_params(domain), requests=["daemon"])]),
    )


@dataclass
class Domains:
    """``DomainLookup``: a dict of known domains."""

    known: dict[str, DomainInfo] = field(default_factory=dict)
    lookups: list[str] = field(default_factory=list)

    async def get(self, uid: str) -> DomainInfo | None:
        self.lookups.append(uid)
        return self.known.get(uid)


@dataclass
class Labels:
    """``NodeLabels``: the node's one ComputeDomain label, with every call recorded."""

    value: str | None = None
    calls: list[tuple[str, str]] = field(default_factory=list)

    async def add(self, domain_uid: str) -> None:
        self.calls.append(("add", domain_uid))
        if self.value not in (None, domain_uid):
            raise RetryableError(f"label already exists for a different ComputeDomain: {self.value}")
        self.value = domain_uid

    async def remove(self, domain_uid: str) -> None:
        self.calls.append(("remove", domain_uid))
        if self.value == domain_uid:
            self.value = None


@dataclass
class Readiness:
    """``DaemonReadiness``: ready or not, as the test says."""

    ready: bool = True
    calls: list[tuple[str, str]] = field(default_factory=list)

    async def node_ready(self, domain: DomainInfo, clique_id: str) -> bool:
        self.calls.append((domain.uid, clique_id))
        return self.ready


@dataclass
class HostImex:
    """``HostImexReadiness``: ready unless ``not_ready`` holds the reason the check gives."""

    not_ready: str | None = None
    calls: int = 0

    async def check(self) -> None:
        self.calls += 1
        if self.not_ready is not None:
            raise HostImexNotReadyError(self.not_ready)


@dataclass
class Owners:
    """``DaemonClaimOwners``: every daemon claim is its domain's own unless ``refusal`` is set."""

    refusal: str | None = None
    calls: list[tuple[str, str]] = field(default_factory=list)

    async def check(self, claim: ResourceClaim, domain_uid: str) -> None:
        self.calls.append((claim.ref.uid, domain_uid))
        if self.refusal is not None:
            raise PermanentError(self.refusal)


@dataclass
class Node:
    """One simulated node's plugin state on disk plus the API stand-ins."""

    root: Path
    imex: ImexManagement = DRIVER_MANAGED_IMEX
    channel_isolation: bool = False
    clique: str = CLIQUE
    domains: Domains = field(default_factory=Domains)
    labels: Labels = field(default_factory=Labels)
    readiness: Readiness = field(default_factory=Readiness)
    owners: Owners = field(default_factory=Owners)
    host_imex: HostImex = field(default_factory=HostImex)
    api_claims: dict[tuple[str, str], Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.domains.known.setdefault(DOMAIN_UID, DomainInfo(DOMAIN_UID, "train-a", NAMESPACE))
        proc_devices = write_proc_devices(self.root / "proc-devices")
        capability = write_fabric_mgmt_capability(self.root / "fabric-imex-mgmt")
        self.devices = HostImexDevices(proc_devices=proc_devices, fabric_mgmt_capability=capability)
        self.paths = PluginPaths(plugins_dir=self.root / "plugins", registrar_dir=self.root / "registry")
        self.paths.plugin_data_dir.mkdir(parents=True, exist_ok=True)
        self.cdi_root = self.root / "cdi"
        self.cdi_root.mkdir(exist_ok=True)
        self.store = CheckpointStore(self.paths.plugin_data_dir)
        self.state = self.new_state()

    def new_state(
        self, store: CheckpointStore | None = None, clock: Callable[[], datetime.datetime] | None = None
    ) -> DeviceState:
        """A DeviceState over this node's files, as a freshly started plugin would build it."""
        applier = ConfigApplier(
            imex=self.imex,
            devices=self.devices,
            paths=self.paths,
            clique_id=lambda: self.clique,
            domains=self.domains,
            labels=self.labels,
            readiness=self.readiness,
            daemon_owners=self.owners,
            host_imex=self.host_imex,
            channel_isolation=self.channel_isolation,
            daemon_config_template=self.root / "no-template",
        )
        state = DeviceState(
            store=store or self.store,
            applier=applier,
            allocatable=allocatable_devices(),
            cdi_root=self.cdi_root,
            roots=DriverRoots(container="/driver-root", host="/"),
            get_claim=self.get_claim,
        )
        if clock is not None:
            state._clock = clock
        return state

    async def initialize(self) -> None:
        await self.store.initialize(BOOT_ID)

    async def get_claim(self, namespace: str, name: str) -> ResourceClaim:
        try:
            obj = self.api_claims[namespace, name]
        except KeyError:
            raise LookupError(f"resourceclaims {name!r} not found") from None
        return parse_claim(obj)

    def cdi_file(self, uid: str) -> Path:
        return self.cdi_root / f"k8s.compute-domain.nvidia.com-claim_{uid}.yaml"

    async def entries(self) -> dict[str, str]:
        """Claim UID -> checkpoint state."""
        checkpoint = await self.store.read()
        return {uid: str(claim.state) for uid, claim in checkpoint.claims.items()}


def params_json(params: Mapping[str, Any]) -> str:
    return json.dumps(params)
