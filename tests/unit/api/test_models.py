"""ComputeDomain and ComputeDomainClique models: wire format, tolerance, and their API wiring.

Aspects covered: the upstream omit/always-emit rules (empty ``status.nodes`` and ``daemons`` left out,
``index`` and ``status`` always written); decoding of objects as the apiserver returns them, including
unknown fields and objects without spec; type errors; the request paths the client derives for every
verb and for the status subresource; list and watch decoding.
"""

from typing import Any

import msgspec
import pytest

from imexdra.api.computedomain import (
    ComputeDomain,
    ComputeDomainNode,
    ComputeDomainStatus,
    ComputeDomainStatusResource,
)
from imexdra.api.computedomainclique import ComputeDomainClique, ComputeDomainDaemonInfo, clique_name
from imexdra.api.constants import AllocationMode, ComputeDomainStatusValue
from imexdra.common.kube.api import ALL_NAMESPACES, PatchType, WatchEvent
from imexdra.common.kube.models.meta_v1 import ObjectMeta
from imexdra.common.kube.resource import decode_list, decode_object
from imexdra.common.kube.transport import resource_path
from imexdra_sim.builders import compute_domain_model

READY = ComputeDomainStatusValue.READY
NOT_READY = ComputeDomainStatusValue.NOT_READY


def compute_domain(*, mode: AllocationMode = AllocationMode.SINGLE, num_nodes: int = 0) -> ComputeDomain:
    """The domain ``team/cd`` these tests encode, as read from the server (resourceVersion 42)."""
    return compute_domain_model("cd", "team", mode=mode, num_nodes=num_nodes, resource_version="42")


def wire(obj: msgspec.Struct) -> Any:
    return msgspec.json.decode(msgspec.json.encode(obj))


def test_new_compute_domain_encodes_like_a_manifest() -> None:
    """A new object carries apiVersion/kind and leaves out defaults the CRD fills in (numNodes, mode)."""
    assert wire(compute_domain()) == {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": "cd", "namespace": "team", "resourceVersion": "42"},
        "spec": {"channel": {"resourceClaimTemplate": {"name": "cd-channel"}}},
    }


def test_non_default_spec_fields_are_written() -> None:
    """allocationMode All and a non-zero numNodes are written."""
    spec = wire(compute_domain(mode=AllocationMode.ALL, num_nodes=4))["spec"]
    assert spec == {
        "numNodes": 4,
        "channel": {"resourceClaimTemplate": {"name": "cd-channel"}, "allocationMode": "All"},
    }


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (ComputeDomainStatus(status=NOT_READY), {"status": "NotReady"}),
        (ComputeDomainStatus(status=READY, nodes=[]), {"status": "Ready"}),
        (
            ComputeDomainStatus(
                status=READY,
                nodes=[
                    ComputeDomainNode(
                        name="a", ip_address="10.0.0.1", clique_id="u.1", index=0, status=READY
                    ),
                    ComputeDomainNode(name="b", ip_address="10.0.0.2", clique_id="", index=-1),
                ],
            ),
            {
                "status": "Ready",
                "nodes": [
                    {"name": "a", "ipAddress": "10.0.0.1", "cliqueID": "u.1", "index": 0, "status": "Ready"},
                    {"name": "b", "ipAddress": "10.0.0.2", "cliqueID": "", "index": -1, "status": "NotReady"},
                ],
            },
        ),
    ],
    ids=["not-ready-without-nodes", "empty-nodes-omitted", "nodes-always-carry-index-and-status"],
)
def test_status_wire_format(status: ComputeDomainStatus, expected: dict[str, Any]) -> None:
    """status.status is always written, empty nodes never, and each node always has index and status."""
    assert wire(status) == expected


def test_decode_server_object_tolerates_unknown_fields() -> None:
    """An apiserver object (defaults applied, extra fields from a newer CRD) decodes to typed values."""
    body = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": "cd", "namespace": "team", "uid": "u-1", "futureMeta": 1},
        "spec": {
            "numNodes": 2,
            "channel": {"resourceClaimTemplate": {"name": "t"}, "allocationMode": "All", "future": True},
        },
        "status": {
            "status": "Ready",
            "nodes": [{"name": "a", "ipAddress": "1.2.3.4", "cliqueID": "c", "index": 3, "status": "Ready"}],
        },
        "future": {"x": 1},
    }
    cd = msgspec.convert(body, ComputeDomain)
    assert cd.spec is not None and cd.status is not None
    assert (cd.spec.num_nodes, cd.spec.channel.allocation_mode) == (2, AllocationMode.ALL)
    assert cd.status.nodes == [
        ComputeDomainNode(name="a", ip_address="1.2.3.4", clique_id="c", index=3, status=READY)
    ]


def test_decode_object_from_an_older_driver() -> None:
    """Nodes written before index/status existed, and objects without spec, still decode."""
    cd = msgspec.convert(
        {
            "metadata": {"name": "old"},
            "status": {"status": "NotReady", "nodes": [{"name": "a", "ipAddress": "1", "cliqueID": ""}]},
        },
        ComputeDomain,
    )
    assert cd.spec is None
    assert cd.status is not None
    assert cd.status.nodes[0].index == 0
    assert cd.status.nodes[0].status is NOT_READY


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        ({"numNodes": -1, "channel": {"resourceClaimTemplate": {"name": "t"}}}, "$.spec.numNodes"),
        ({"numNodes": "4", "channel": {"resourceClaimTemplate": {"name": "t"}}}, "$.spec.numNodes"),
        (
            {"channel": {"resourceClaimTemplate": {"name": "t"}, "allocationMode": "Many"}},
            "$.spec.channel.allocationMode",
        ),
        ({"channel": {"resourceClaimTemplate": {}}}, "$.spec.channel.resourceClaimTemplate"),
        ({"numNodes": 1}, "$.spec"),
    ],
    ids=[
        "negative-num-nodes",
        "string-num-nodes",
        "unknown-mode",
        "template-without-name",
        "missing-channel",
    ],
)
def test_decode_rejects_invalid_spec(spec: dict[str, Any], path: str) -> None:
    """Values the CRD forbids fail to decode with the JSON path in the message."""
    with pytest.raises(msgspec.ValidationError, match=path.replace("$", r"\$")):
        msgspec.convert({"spec": spec}, ComputeDomain)


def test_status_update_keeps_identity_and_version() -> None:
    """The status-subresource body carries name, namespace and resourceVersion (optimistic locking)."""
    cd = compute_domain()
    body = cd.status_update(ComputeDomainStatus(status=READY))
    assert isinstance(body, ComputeDomainStatusResource)
    assert ComputeDomain.Status is ComputeDomainStatusResource
    assert wire(body)["metadata"] == {"name": "cd", "namespace": "team", "resourceVersion": "42"}
    assert wire(body)["status"] == {"status": "Ready"}


def test_clique_wire_format_and_name() -> None:
    """Cliques omit an empty daemons list, always write index/status, and are named <cdUID>.<cliqueID>."""
    assert wire(ComputeDomainClique(metadata=ObjectMeta(name="n"))) == {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomainClique",
        "metadata": {"name": "n"},
    }
    daemon = ComputeDomainDaemonInfo(node_name="a", ip_address="10.0.0.1", clique_id="uuid.1")
    assert wire(daemon) == {
        "nodeName": "a",
        "ipAddress": "10.0.0.1",
        "cliqueID": "uuid.1",
        "index": 0,
        "status": "NotReady",
    }
    assert clique_name("cd-uid", "cluster-uuid.7") == "cd-uid.cluster-uuid.7"


BASE = "apis/resource.nvidia.com/v1beta1"


@pytest.mark.parametrize(
    ("request_args", "method", "url"),
    [
        (
            {"method": "get", "res": ComputeDomain, "name": "cd"},
            "GET",
            f"{BASE}/namespaces/ns/computedomains/cd",
        ),
        ({"method": "list", "res": ComputeDomain}, "GET", f"{BASE}/namespaces/ns/computedomains"),
        (
            {"method": "list", "res": ComputeDomain, "namespace": ALL_NAMESPACES},
            "GET",
            f"{BASE}/computedomains",
        ),
        ({"method": "post", "obj": compute_domain()}, "POST", f"{BASE}/namespaces/team/computedomains"),
        ({"method": "put", "obj": compute_domain()}, "PUT", f"{BASE}/namespaces/team/computedomains/cd"),
        (
            {"method": "delete", "res": ComputeDomain, "name": "cd"},
            "DELETE",
            f"{BASE}/namespaces/ns/computedomains/cd",
        ),
        (
            {"method": "get", "res": ComputeDomain.Status, "name": "cd"},
            "GET",
            f"{BASE}/namespaces/ns/computedomains/cd/status",
        ),
        (
            {
                "method": "patch",
                "res": ComputeDomain.Status,
                "name": "cd",
                "obj": {},
                "headers": {"Content-Type": PatchType.MERGE.value},
            },
            "PATCH",
            f"{BASE}/namespaces/ns/computedomains/cd/status",
        ),
        (
            {
                "method": "put",
                "res": ComputeDomain.Status,
                "name": "cd",
                "obj": compute_domain().status_update(ComputeDomainStatus(status=READY)),
            },
            "PUT",
            f"{BASE}/namespaces/team/computedomains/cd/status",
        ),
        ({"method": "list", "res": ComputeDomainClique}, "GET", f"{BASE}/namespaces/ns/computedomaincliques"),
        (
            {"method": "get", "res": ComputeDomainClique, "name": "x.y"},
            "GET",
            f"{BASE}/namespaces/ns/computedomaincliques/x.y",
        ),
    ],
    ids=[
        "get",
        "list",
        "list-all-namespaces",
        "create",
        "replace",
        "delete",
        "get-status",
        "patch-status",
        "replace-status",
        "list-cliques",
        "get-clique",
    ],
)
def test_request_paths(request_args: dict[str, Any], method: str, url: str) -> None:
    """The client derives the CRD's REST paths from the registered classes for every verb, including
    the status subresource (``method`` is the verb's HTTP method, for the reader)."""
    obj = request_args.get("obj")
    res = request_args.get("res") or type(obj)
    meta = getattr(obj, "metadata", None)
    namespace = request_args.get("namespace", getattr(meta, "namespace", None) or "ns")
    name = request_args.get("name") or (meta.name if request_args["method"] == "put" and meta else None)
    scope = None if namespace == ALL_NAMESPACES else namespace
    assert method in {"GET", "POST", "PUT", "PATCH", "DELETE"}
    assert resource_path(res, name, namespace=scope) == f"/{url}"


def test_list_and_watch_bodies_decode_to_typed_objects() -> None:
    """LIST and watch payloads decode straight into the typed classes."""
    item = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": "a", "resourceVersion": "7"},
    }
    _, rv, items = decode_list(
        msgspec.json.encode({"metadata": {"resourceVersion": "9"}, "items": [item]}), ComputeDomain
    )
    assert rv == "9"
    assert [type(cd) for cd in items] == [ComputeDomain]
    event = msgspec.json.decode(msgspec.json.encode({"type": "ADDED", "object": item}), type=WatchEvent)
    watched = decode_object(event.object, ComputeDomain)
    assert isinstance(watched, ComputeDomain)
    assert watched.metadata is not None and watched.metadata.resourceVersion == "7"
