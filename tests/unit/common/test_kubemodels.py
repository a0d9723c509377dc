"""The generated Kubernetes models (common.kube.models) are the spec's definitions, every field of them.

- The committed modules are exactly what tools/kubemodels/generate.py renders from the committed
  closure (tools/kubemodels/closure.json): no hand edit, no generator change left unrendered.
- The closure is what the generator extracts from Kubernetes' swagger.json at tools/k8s/versions.env's
  KUBE_VERSION (the Go module cache's copy, there once ``make k8s`` ran): a version bump without
  ``make kubemodels`` fails here.
- An object with every field of its definition set (built from the closure, recursively) survives a
  decode and encode unchanged, for every generated class: each wire name is a field, with a type that
  takes the spec's values.
"""

from __future__ import annotations

import datetime as dt
import importlib
import json
from types import ModuleType
from typing import Any

import msgspec
import pytest

from imexdra.common.kube.models.core_v1 import Node, Pod
from imexdra.common.kube.resource import api_info
from tests.support.paths import REPO
from tests.support.scripts import load_script

GENERATOR = REPO / "tools" / "kubemodels" / "generate.py"
#: Below this nesting only required fields are filled (JSONSchemaProps contains itself).
DEPTH = 4
INLINE_SAMPLES: dict[str, Any] = {
    "str": "1500m",
    "datetime": "2026-12-04T03:04:05.123456Z",
    "int | str": "http",
    "dict[str, Any]": {"f:metadata": {"f:labels": {}}},
    "Any": {"free": ["form", 1]},
}


@pytest.fixture(scope="module")
def generator() -> ModuleType:
    return load_script(GENERATOR)


@pytest.fixture(scope="module")
def closure(generator: ModuleType) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(generator.CLOSURE.read_text())
    return loaded


def test_the_committed_models_are_the_closure_rendered(
    generator: ModuleType, closure: dict[str, Any]
) -> None:
    """Each module on disk is the generator's text for it, and there is no other (make kubemodels)."""
    rendered = generator.render(closure)
    on_disk = {path.name: path.read_text() for path in generator.OUT.glob("*.py")}
    assert sorted(on_disk) == sorted(rendered)
    stale = [name for name, text in rendered.items() if on_disk[name] != text]
    assert stale == [], "regenerate with make kubemodels"


def test_the_closure_is_the_specs(generator: ModuleType, closure: dict[str, Any]) -> None:
    """Extracting again from KUBE_VERSION's swagger.json gives the committed closure."""
    path = generator.spec_path()
    if not path.is_file():
        pytest.skip(f"{path} is not in the Go module cache (make k8s fetches it)")
    assert generator.extract(json.loads(path.read_text()), generator.source_name(path)) == closure


def _sample(closure: dict[str, Any], generator: ModuleType, name: str, depth: int) -> dict[str, Any]:
    definition = closure["definitions"][name]
    sample: dict[str, Any] = {}
    for field, schema in definition["properties"].items():
        if depth >= DEPTH and field not in definition["required"]:
            continue
        sample[field] = _value(closure, generator, schema, depth + 1)
    if "gvk" in definition and {"apiVersion", "kind"} <= sample.keys():
        group, version, kind = definition["gvk"]
        sample["apiVersion"], sample["kind"] = f"{group}/{version}" if group else version, kind
    return sample


def _value(closure: dict[str, Any], generator: ModuleType, schema: dict[str, Any], depth: int) -> Any:
    if "$ref" in schema:
        target = schema["$ref"].rsplit("/", 1)[-1]
        if target in generator.INLINE:
            return INLINE_SAMPLES[generator.INLINE[target]]
        return _sample(closure, generator, target, depth)
    kind = schema.get("type")
    if kind == "array":
        return [_value(closure, generator, schema["items"], depth)]
    if kind == "object":
        values = schema.get("additionalProperties")
        return {"key": _value(closure, generator, values, depth) if values else "anything"}
    return {"string": "text", "integer": 7, "number": 0.5, "boolean": True}.get(kind or "", {"any": 1})


def _models(generator: ModuleType, closure: dict[str, Any]) -> list[tuple[str, type[Any]]]:
    found = []
    for name in closure["definitions"]:
        module = importlib.import_module(f"{generator.PACKAGE}.{generator.module_of(name)}")
        found.append((name, getattr(module, name.rsplit(".", 1)[-1])))
    return found


def test_every_field_of_every_model_round_trips(generator: ModuleType, closure: dict[str, Any]) -> None:
    """Each class decodes a full object of its definition and encodes it back unchanged."""
    changed = []
    for name, cls in _models(generator, closure):
        wire = _sample(closure, generator, name, 0)
        again = msgspec.json.decode(msgspec.json.encode(msgspec.json.decode(json.dumps(wire), type=cls)))
        if again != wire:
            changed.append(name)
    assert changed == []


def test_kinds_know_their_urls_and_stamp_their_type() -> None:
    """A kind's class carries its plural and scope; a new object says what it is, its status a subresource."""
    assert api_info(Pod).plural == "pods" and api_info(Pod).namespaced
    assert not api_info(Node).namespaced and api_info(Node.Status).subresource == "status"
    assert msgspec.to_builtins(Pod()) == {"apiVersion": "v1", "kind": "Pod"}
    node = msgspec.json.decode(b'{"metadata": {"creationTimestamp": "2026-12-04T03:04:05Z"}}', type=Node)
    assert node.metadata is not None and node.metadata.creationTimestamp == dt.datetime(
        2026, 12, 4, 3, 4, 5, tzinfo=dt.UTC
    )
