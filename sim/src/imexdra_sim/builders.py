"""The API objects tests, benchmarks and the demo create, each built in one place.

- ``compute_domain``: a ComputeDomain manifest (a dict, for ``kubectl apply`` or raw requests), and
  ``compute_domain_model``: the same object as the driver's typed model (for typed clients);
- ``channel_config``, ``channel_template``, ``channel_claim``: the workload side of a domain, as the
  controller renders it (``ResourceClaimTemplate``) and as the kubelet sees it (a claim from it);
- ``daemon_device_class``: upstream's DeviceClass for the IMEX daemons' claims (the chart ships it);
  ``isolated_channel_device_class``: the chart's class of channels 1 and up (channel isolation);
  ``daemon_slice``: the ResourceSlice a node's plugin publishes for its daemon device (for stand-ins
  of the plugin: API-only nodes in tests and benchmarks).

Hand-written objects that exist to probe one odd shape (admission attacks, unknown fields) stay in
the test that probes them: a builder here is for the ordinary object everyone means.
"""

from __future__ import annotations

from typing import Any

from imexdra.api.computedomain import (
    ComputeDomain,
    ComputeDomainChannelSpec,
    ComputeDomainSpec,
    ResourceClaimTemplateReference,
)
from imexdra.api.constants import (
    API_VERSION,
    CHANNEL_REQUEST_NAME,
    DEVICE_CLASS_CHANNEL,
    DEVICE_CLASS_DAEMON,
    DEVICE_CLASS_DEFAULT_CHANNEL,
    DRIVER_NAME,
    KIND_CHANNEL_CONFIG,
    KIND_COMPUTE_DOMAIN,
    AllocationMode,
)
from imexdra.common.kube.models.meta_v1 import ObjectMeta

RESOURCE_API_VERSION = "resource.k8s.io/v1"


def _metadata(name: str, namespace: str | None) -> dict[str, Any]:
    # Objects without a namespace are created through a namespaced client or URL (the benchmarks).
    return {"name": name, "namespace": namespace} if namespace else {"name": name}


def compute_domain(
    name: str,
    namespace: str | None = None,
    template: str | None = None,
    *,
    num_nodes: int = 0,
    mode: AllocationMode | str | None = None,
) -> dict[str, Any]:
    """A ComputeDomain manifest whose workload claim template is ``template`` (``<name>-channel``).

    ``mode`` (the channel's ``allocationMode``) is left out unless given, as users write it.
    """
    channel: dict[str, Any] = {"resourceClaimTemplate": {"name": template or f"{name}-channel"}}
    if mode is not None:
        channel["allocationMode"] = str(mode)  # a plain str: yaml.safe_dump refuses StrEnum members
    return {
        "apiVersion": API_VERSION,
        "kind": KIND_COMPUTE_DOMAIN,
        "metadata": _metadata(name, namespace),
        "spec": {"numNodes": num_nodes, "channel": channel},
    }


def compute_domain_model(
    name: str,
    namespace: str | None = None,
    *,
    template: str | None = None,
    num_nodes: int = 0,
    mode: AllocationMode = AllocationMode.SINGLE,
    uid: str | None = None,
    resource_version: str | None = None,
) -> ComputeDomain:
    """``compute_domain`` as the typed model; ``uid`` and ``resource_version`` as a server would set them."""
    return ComputeDomain(
        metadata=ObjectMeta(name=name, namespace=namespace, uid=uid, resourceVersion=resource_version),
        spec=ComputeDomainSpec(
            num_nodes=num_nodes,
            channel=ComputeDomainChannelSpec(
                resource_claim_template=ResourceClaimTemplateReference(name=template or f"{name}-channel"),
                allocation_mode=mode,
            ),
        ),
    )


def channel_config(domain_uid: str, mode: AllocationMode | str = AllocationMode.SINGLE) -> dict[str, Any]:
    """The opaque ComputeDomainChannelConfig entry for the ``channel`` request of a domain's claims."""
    return {
        "requests": [CHANNEL_REQUEST_NAME],
        "opaque": {
            "driver": DRIVER_NAME,
            "parameters": {
                "apiVersion": API_VERSION,
                "kind": KIND_CHANNEL_CONFIG,
                "domainID": domain_uid,
                "allocationMode": str(mode),
            },
        },
    }


def _channel_devices(
    domain_uid: str | None, mode: AllocationMode | str, channel: int | None = None
) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": DEVICE_CLASS_DEFAULT_CHANNEL}
    if channel is not None:  # channel isolation: the domain's own number (docs/channel-isolation.md §6)
        expression = f'device.attributes["{DRIVER_NAME}"].id == {int(channel)}'
        exactly = {
            "deviceClassName": DEVICE_CLASS_CHANNEL,
            "selectors": [{"cel": {"expression": expression}}],
        }
    request = {"name": CHANNEL_REQUEST_NAME, "exactly": exactly}
    devices: dict[str, Any] = {"requests": [request]}
    if domain_uid is not None:
        devices["config"] = [channel_config(domain_uid, mode)]
    return devices


def channel_template(
    namespace: str | None,
    name: str,
    domain_uid: str | None = None,
    mode: AllocationMode | str = AllocationMode.SINGLE,
    *,
    channel: int | None = None,
) -> dict[str, Any]:
    """The workload ResourceClaimTemplate as the controller renders it for the domain ``domain_uid``.

    Without ``domain_uid`` it has no config: the bare request, for tests that only need a claim to exist.
    With ``channel`` it is channel isolation's: the isolated-channel class narrowed to that number.
    """
    return {
        "apiVersion": RESOURCE_API_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": _metadata(name, namespace),
        "spec": {"spec": {"devices": _channel_devices(domain_uid, mode, channel)}},
    }


def channel_claim(
    namespace: str | None,
    name: str,
    domain_uid: str | None = None,
    mode: AllocationMode | str = AllocationMode.SINGLE,
) -> dict[str, Any]:
    """A ResourceClaim as the resourceclaim controller makes it from ``channel_template``."""
    return {
        "apiVersion": RESOURCE_API_VERSION,
        "kind": "ResourceClaim",
        "metadata": _metadata(name, namespace),
        "spec": {"devices": _channel_devices(domain_uid, mode)},
    }


def isolated_channel_device_class() -> dict[str, Any]:
    """The chart's DeviceClass of IMEX channels 1 and up, installed under channel isolation only."""
    attributes = f"device.attributes['{DRIVER_NAME}']"
    expression = f"device.driver == '{DRIVER_NAME}' && {attributes}.type == 'channel' && {attributes}.id >= 1"
    return {
        "apiVersion": RESOURCE_API_VERSION,
        "kind": "DeviceClass",
        "metadata": {"name": DEVICE_CLASS_CHANNEL},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def daemon_device_class() -> dict[str, Any]:
    """Upstream's DeviceClass for daemon claims (the chart ships it)."""
    expression = f"device.driver == '{DRIVER_NAME}' && device.attributes['{DRIVER_NAME}'].type == 'daemon'"
    return {
        "apiVersion": RESOURCE_API_VERSION,
        "kind": "DeviceClass",
        "metadata": {"name": DEVICE_CLASS_DAEMON},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def daemon_slice(node: str, node_uid: str | None = None) -> dict[str, Any]:
    """The ResourceSlice the kubelet plugin publishes for a node's daemon device (channel omitted)."""
    meta: dict[str, Any] = {"name": f"{node}-{DRIVER_NAME}-daemon"}
    if node_uid:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid}]
    return {
        "apiVersion": RESOURCE_API_VERSION,
        "kind": "ResourceSlice",
        "metadata": meta,
        "spec": {
            "driver": DRIVER_NAME,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "daemon-0", "attributes": {"type": {"string": "daemon"}, "id": {"int": 0}}}],
        },
    }
