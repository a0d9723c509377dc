"""The CRD manifests against upstream's shape and against the msgspec models.

Aspects covered: names, scope, versions and subresources; the immutable-spec rule; printer columns
pointing at real schema fields; the schema tree (properties, types, required lists, enums, minimums,
defaults) equal to what the models declare; and sample objects, valid and invalid, that jsonschema
(with the CRD's openAPIV3Schema) and the models accept or reject alike.
"""

from typing import Any

import jsonschema
import msgspec
import msgspec.inspect as mi
import pytest
import yaml

from imexdra.api.computedomain import ComputeDomain, ComputeDomainSpec, ComputeDomainStatus, Condition
from imexdra.api.computedomainclique import ComputeDomainClique, ComputeDomainDaemonInfo
from imexdra.api.constants import ComputeDomainStatusValue
from tests.support.paths import CRD_DIR

FILES = {
    "computedomains": CRD_DIR / "resource.nvidia.com_computedomains.yaml",
    "computedomaincliques": CRD_DIR / "resource.nvidia.com_computedomaincliques.yaml",
}


def load_crd(plural: str) -> dict[str, Any]:
    crd: dict[str, Any] = yaml.safe_load(FILES[plural].read_text())
    return crd


def version(plural: str) -> dict[str, Any]:
    (only,) = load_crd(plural)["spec"]["versions"]
    assert isinstance(only, dict)
    return only


def schema(plural: str) -> dict[str, Any]:
    openapi: dict[str, Any] = version(plural)["schema"]["openAPIV3Schema"]
    return openapi


@pytest.mark.parametrize(
    ("plural", "kind", "subresources"),
    [
        ("computedomains", "ComputeDomain", {"status": {}}),
        ("computedomaincliques", "ComputeDomainClique", None),
    ],
    ids=["computedomains", "computedomaincliques"],
)
def test_crd_identity(plural: str, kind: str, subresources: dict[str, Any] | None) -> None:
    """One file per CRD with upstream's names, Namespaced scope, one served+storage v1beta1 version."""
    crd = load_crd(plural)
    assert crd["metadata"]["name"] == f"{plural}.resource.nvidia.com"
    assert crd["spec"]["group"] == "resource.nvidia.com"
    assert crd["spec"]["scope"] == "Namespaced"
    assert crd["spec"]["names"] == {
        "kind": kind,
        "listKind": f"{kind}List",
        "plural": plural,
        "singular": plural.removesuffix("s"),
    }
    assert (version(plural)["name"], version(plural)["served"], version(plural)["storage"]) == (
        "v1beta1",
        True,
        True,
    )
    assert version(plural).get("subresources") == subresources


def test_spec_is_immutable() -> None:
    """The whole ComputeDomain spec carries upstream's CEL rule and message."""
    assert schema("computedomains")["properties"]["spec"]["x-kubernetes-validations"] == [
        {"message": "A computeDomain.spec is immutable", "rule": "self == oldSelf"}
    ]


@pytest.mark.parametrize(
    ("plural", "columns"),
    [
        (
            "computedomains",
            [
                ("Status", "string", ".status.status"),
                ("Channel", "integer", ".status.channel"),
                ("Mode", "string", ".spec.channel.allocationMode"),
                ("NumNodes", "integer", ".spec.numNodes"),
                ("Template", "string", ".spec.channel.resourceClaimTemplate.name"),
                ("Age", "date", ".metadata.creationTimestamp"),
            ],
        ),
        (
            "computedomaincliques",
            [
                ("ComputeDomain", "string", r".metadata.labels.resource\.nvidia\.com/computeDomain"),
                ("Age", "date", ".metadata.creationTimestamp"),
            ],
        ),
    ],
    ids=["computedomains", "computedomaincliques"],
)
def test_printer_columns(plural: str, columns: list[tuple[str, str, str]]) -> None:
    """Our printer columns read existing schema fields of the declared type."""
    declared = [(c["name"], c["type"], c["jsonPath"]) for c in version(plural)["additionalPrinterColumns"]]
    assert declared == columns
    for _, column_type, path in columns:
        if path.startswith(".metadata."):
            continue
        node = schema(plural)
        for part in path.removeprefix(".").replace("[*]", "").split("."):
            node = node["properties"][part]
            node = node.get("items", node) if node.get("type") == "array" else node
        assert node["type"] == column_type


def crd_shape(node: dict[str, Any], path: str = "$", required: bool = False) -> dict[str, tuple[Any, ...]]:
    """Flatten a structural schema into path -> (type, required, enum, minimum, default)."""
    shape = {
        path: (node["type"], required, tuple(node.get("enum", ())), node.get("minimum"), node.get("default"))
    }
    if node["type"] == "array":
        shape |= crd_shape(node["items"], f"{path}[]", True)
    for name, child in node.get("properties", {}).items():
        if name in ("apiVersion", "kind", "metadata"):
            continue
        shape |= crd_shape(child, f"{path}.{name}", name in node.get("required", ()))
    return shape


def model_shape(
    info: mi.Type, path: str = "$", required: bool = False, default: Any = None
) -> dict[str, tuple[Any, ...]]:
    """Flatten a msgspec type into the same form as ``crd_shape``."""
    if isinstance(info, mi.UnionType):
        (info,) = (member for member in info.types if not isinstance(member, mi.NoneType))
    if isinstance(info, mi.StructType):
        shape = {path: ("object", required, (), None, None)}
        for field in info.fields:
            if field.encode_name in ("apiVersion", "kind", "metadata"):
                continue
            field_default = None if field.default is msgspec.NODEFAULT else field.default
            shape |= model_shape(field.type, f"{path}.{field.encode_name}", field.required, field_default)
        return shape
    if isinstance(info, mi.ListType):
        return {path: ("array", required, (), None, None)} | model_shape(info.item_type, f"{path}[]", True)
    if isinstance(info, mi.EnumType):
        return {path: ("string", required, tuple(m.value for m in info.cls), None, default)}
    if isinstance(info, mi.DateTimeType):
        return {path: ("string", required, (), None, default)}
    if isinstance(info, mi.IntType):
        return {path: ("integer", required, (), info.ge, default)}
    assert isinstance(info, mi.StrType)
    return {path: ("string", required, (), None, default)}


@pytest.mark.parametrize(
    ("plural", "model"),
    [("computedomains", ComputeDomain), ("computedomaincliques", ComputeDomainClique)],
    ids=["cd", "clique"],
)
def test_schema_tree_equals_models(plural: str, model: type[msgspec.Struct]) -> None:
    """Field names, types, required lists, enums (as sets), minimums and defaults agree with the models."""
    from_crd = crd_shape(schema(plural))
    from_model = model_shape(mi.type_info(model))
    assert from_crd.keys() == from_model.keys()
    for path in from_crd:
        crd_type, crd_required, crd_enum, crd_minimum, crd_default = from_crd[path]
        model_type, model_required, model_enum, model_minimum, model_default = from_model[path]
        assert (crd_type, set(crd_enum), crd_minimum) == (model_type, set(model_enum), model_minimum), path
        # A CRD default makes a field optional on input; the models still require status.status so it
        # is always written. Everything else must match exactly.
        if crd_default is not None and model_required:
            assert path == "$.status.status"
        else:
            assert crd_required == model_required, path
            assert crd_default == model_default or crd_default is None, path


def valid_by_crd(plural: str, obj: dict[str, Any]) -> bool:
    try:
        jsonschema.validate(obj, schema(plural))
    except jsonschema.ValidationError:
        return False
    return True


def valid_by_model(model: type[msgspec.Struct], obj: dict[str, Any]) -> bool:
    try:
        msgspec.convert(obj, model)
    except msgspec.ValidationError:
        return False
    return True


TEMPLATE = {"resourceClaimTemplate": {"name": "t"}}
NODE = {"name": "a", "ipAddress": "10.0.0.1", "cliqueID": "u.1"}
CONDITION = {
    "type": "ChannelAllocated",
    "status": "False",
    "reason": "ChannelsExhausted",
    "message": "all 2047 channels are taken",
    "lastTransitionTime": "2026-11-01T10:00:00Z",
}
DAEMON = {"nodeName": "a", "ipAddress": "10.0.0.1", "cliqueID": "u.1"}


@pytest.mark.parametrize(
    ("plural", "model", "obj", "valid"),
    [
        ("computedomains", ComputeDomain, {"spec": {"channel": TEMPLATE}}, True),
        (
            "computedomains",
            ComputeDomain,
            {"spec": {"numNodes": 4, "channel": {**TEMPLATE, "allocationMode": "All"}}},
            True,
        ),
        ("computedomains", ComputeDomain, {"metadata": {"name": "no-spec"}}, True),
        (
            "computedomains",
            ComputeDomain,
            {"spec": {"channel": TEMPLATE}, "status": {"status": "Ready", "nodes": [NODE]}},
            True,
        ),
        (
            "computedomains",
            ComputeDomain,
            {"status": {"status": "NotReady", "nodes": [{**NODE, "index": -1, "status": "Ready"}]}},
            True,
        ),
        ("computedomains", ComputeDomain, {"status": {"status": "Ready", "channel": 7}}, True),
        (
            "computedomains",
            ComputeDomain,
            {"status": {"status": "NotReady", "conditions": [{**CONDITION, "observedGeneration": 2}]}},
            True,
        ),
        ("computedomains", ComputeDomain, {"status": {"status": "Ready", "channel": 0}}, False),
        ("computedomains", ComputeDomain, {"status": {"status": "Ready", "channel": "7"}}, False),
        (
            "computedomains",
            ComputeDomain,
            {"status": {"status": "NotReady", "conditions": [{**CONDITION, "status": "Maybe"}]}},
            False,
        ),
        (
            "computedomains",
            ComputeDomain,
            {"status": {"status": "NotReady", "conditions": [{**CONDITION, "reason": "no spaces"}]}},
            False,
        ),
        (
            "computedomains",
            ComputeDomain,
            {"status": {"status": "NotReady", "conditions": [{**CONDITION, "reason": ""}]}},
            False,
        ),
        (
            "computedomains",
            ComputeDomain,
            {
                "status": {
                    "status": "NotReady",
                    "conditions": [{k: v for k, v in CONDITION.items() if k != "message"}],
                }
            },
            False,
        ),
        ("computedomains", ComputeDomain, {"spec": {"numNodes": -1, "channel": TEMPLATE}}, False),
        ("computedomains", ComputeDomain, {"spec": {"numNodes": 1.5, "channel": TEMPLATE}}, False),
        ("computedomains", ComputeDomain, {"spec": {"numNodes": "4", "channel": TEMPLATE}}, False),
        (
            "computedomains",
            ComputeDomain,
            {"spec": {"channel": {**TEMPLATE, "allocationMode": "Many"}}},
            False,
        ),
        (
            "computedomains",
            ComputeDomain,
            {"spec": {"channel": {**TEMPLATE, "allocationMode": "single"}}},
            False,
        ),
        ("computedomains", ComputeDomain, {"spec": {"numNodes": 1}}, False),
        ("computedomains", ComputeDomain, {"spec": {"channel": {"allocationMode": "All"}}}, False),
        ("computedomains", ComputeDomain, {"spec": {"channel": {"resourceClaimTemplate": {}}}}, False),
        ("computedomains", ComputeDomain, {"status": {"status": "Unknown"}}, False),
        (
            "computedomains",
            ComputeDomain,
            {"status": {"status": "Ready", "nodes": [{**NODE, "status": "Up"}]}},
            False,
        ),
        (
            "computedomains",
            ComputeDomain,
            {"status": {"status": "Ready", "nodes": [{"name": "a", "ipAddress": "1"}]}},
            False,
        ),
        (
            "computedomains",
            ComputeDomain,
            {"status": {"status": "Ready", "nodes": [{**NODE, "index": "0"}]}},
            False,
        ),
        (
            "computedomaincliques",
            ComputeDomainClique,
            {"daemons": [DAEMON, {**DAEMON, "nodeName": "b", "index": 1}]},
            True,
        ),
        ("computedomaincliques", ComputeDomainClique, {"metadata": {"name": "empty"}}, True),
        (
            "computedomaincliques",
            ComputeDomainClique,
            {"daemons": [{"ipAddress": "1", "cliqueID": "c"}]},
            False,
        ),
        ("computedomaincliques", ComputeDomainClique, {"daemons": [{**DAEMON, "status": "Gone"}]}, False),
        ("computedomaincliques", ComputeDomainClique, {"daemons": {"a": DAEMON}}, False),
    ],
    ids=[
        "minimal",
        "all-fields",
        "no-spec",
        "status-with-nodes",
        "non-fabric-node",
        "status-channel",
        "status-condition",
        "channel-0",
        "string-channel",
        "unknown-condition-status",
        "condition-reason-not-camel-case",
        "empty-condition-reason",
        "condition-without-message",
        "negative-num-nodes",
        "fractional-num-nodes",
        "string-num-nodes",
        "unknown-mode",
        "lowercase-mode",
        "missing-channel",
        "missing-template",
        "missing-template-name",
        "unknown-status",
        "unknown-node-status",
        "node-without-clique",
        "string-index",
        "clique-two-daemons",
        "clique-empty",
        "daemon-without-node-name",
        "unknown-daemon-status",
        "daemons-not-a-list",
    ],
)
def test_samples_agree(plural: str, model: type[msgspec.Struct], obj: dict[str, Any], valid: bool) -> None:
    """The CRD schema and the models accept and reject the same sample objects."""
    assert valid_by_crd(plural, obj) is valid
    assert valid_by_model(model, obj) is valid


@pytest.mark.parametrize(
    ("plural", "obj"),
    [
        (
            "computedomains",
            ComputeDomain(spec=msgspec.convert({"numNodes": 2, "channel": TEMPLATE}, ComputeDomainSpec)),
        ),
        (
            "computedomains",
            ComputeDomain(
                status=msgspec.convert(
                    {"status": "Ready", "nodes": [{**NODE, "index": -1}]}, ComputeDomainStatus
                )
            ),
        ),
        (
            "computedomains",
            ComputeDomain(
                status=ComputeDomainStatus(
                    status=ComputeDomainStatusValue.NOT_READY,
                    channel=3,
                    conditions=[msgspec.convert(CONDITION, Condition)],
                )
            ),
        ),
        (
            "computedomaincliques",
            ComputeDomainClique(daemons=[msgspec.convert(DAEMON, ComputeDomainDaemonInfo)]),
        ),
    ],
    ids=["spec", "status", "channel-status", "clique"],
)
def test_model_output_validates_against_crd(plural: str, obj: msgspec.Struct) -> None:
    """What the models encode is valid under the CRD schema."""
    assert valid_by_crd(plural, msgspec.json.decode(msgspec.json.encode(obj)))


def test_domain_isolation_status_is_upstreams() -> None:
    """Without a channel or conditions the encoded status has only upstream's keys."""
    status = ComputeDomainStatus(status=ComputeDomainStatusValue.READY)
    assert msgspec.json.encode(status) == b'{"status":"Ready"}'
