#!/usr/bin/env python3
"""Generate the Kubernetes model modules in src/imexdra/common/kube/models/ from the OpenAPI v2 spec.

Two steps, so that a unit test can rerun the second without Kubernetes' source tree:

1. ``extract``: from Kubernetes' ``api/openapi-spec/swagger.json`` (in the Go module cache, at the
   version of tools/k8s/versions.env), the transitive closure of the definitions of ``ROOTS``, with
   each kind's URL facts (plural, namespaced) taken from the spec's paths, written to
   ``tools/kubemodels/closure.json`` (descriptions cut to their first sentence);
2. ``render``: that closure as msgspec Struct modules, one per group-version (``core_v1.py``...).

The models keep the class names and camelCase field names of the models they replace, their required
fields (those the spec requires), their renames of Python keywords (``from_``, ``continue_``), their
``Time`` as ``datetime`` and their stamping of apiVersion and kind on every object of a kind
(docs/kube-client.md).

Usage: ``tools/kubemodels/generate.py [--spec swagger.json]`` (``make kubemodels``; the default spec
is the module cache's); ``--from-closure`` renders closure.json again without reading a spec.
"""

from __future__ import annotations

import argparse
import json
import keyword
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

TOP = Path(__file__).resolve().parents[2]
CLOSURE = TOP / "tools" / "kubemodels" / "closure.json"
OUT = TOP / "src" / "imexdra" / "common" / "kube" / "models"
PACKAGE = "imexdra.common.kube.models"

#: The kinds our code, simulator, tests and benchmarks read or write, by definition name.
ROOTS = (
    "io.k8s.api.apps.v1.DaemonSet",
    "io.k8s.api.apps.v1.Deployment",
    "io.k8s.api.authentication.v1.SelfSubjectReview",
    "io.k8s.api.batch.v1.Job",
    "io.k8s.api.coordination.v1.Lease",
    "io.k8s.api.core.v1.ConfigMap",
    "io.k8s.api.core.v1.Event",
    "io.k8s.api.core.v1.Namespace",
    "io.k8s.api.core.v1.Node",
    "io.k8s.api.core.v1.Pod",
    "io.k8s.api.events.v1.Event",
    "io.k8s.api.networking.v1.NetworkPolicy",
    "io.k8s.api.resource.v1.DeviceClass",
    "io.k8s.api.resource.v1.ResourceClaim",
    "io.k8s.api.resource.v1.ResourceClaimTemplate",
    "io.k8s.api.resource.v1.ResourceSlice",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition",
    "io.k8s.apimachinery.pkg.apis.meta.v1.Status",
)

#: Definitions that are no object of their own: rendered inline as these types.
INLINE = {
    "io.k8s.apimachinery.pkg.api.resource.Quantity": "str",
    "io.k8s.apimachinery.pkg.apis.meta.v1.Time": "datetime",
    "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime": "datetime",
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": "int | str",
    "io.k8s.apimachinery.pkg.runtime.RawExtension": "dict[str, Any]",
    "io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1": "dict[str, Any]",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceSubresourceStatus": (
        "dict[str, Any]"
    ),
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSON": "Any",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrArray": "Any",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrBool": "Any",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrStringArray": "Any",
}

#: Fields the spec requires but the models we replaced (from a later spec) left optional; kept optional
#: so that every object that decoded before still decodes (docs/kube-client.md).
OPTIONAL = {
    "io.k8s.api.apps.v1.DaemonSetCondition": {"status", "type"},
    "io.k8s.api.apps.v1.DeploymentCondition": {"status", "type"},
    "io.k8s.api.resource.v1.DeviceClass": {"spec"},
    "io.k8s.api.resource.v1.ResourceClaim": {"spec"},
    "io.k8s.api.resource.v1.ResourceClaimTemplate": {"spec"},
    "io.k8s.api.resource.v1.ResourceClaimTemplateSpec": {"spec"},
}

_API_IMPORT = "from imexdra.common.kube.resource import ApiInfo"
_BUILTINS = ("bool", "int", "str", "float", "list", "dict")
_STATUS = re.compile(r"^/apis?/(?:[^/]+/)?v[^/]+/(?:namespaces/\{namespace\}/)?[a-z0-9]+/\{name\}/status$")
_PATH = re.compile(
    r"^/apis?/(?:(?P<group>[^/]+)/)?(?P<version>v[^/]+)/(?P<ns>namespaces/\{namespace\}/)?(?P<plural>[a-z0-9]+)$"
)


def module_of(name: str) -> str:
    """``io.k8s.api.core.v1.Pod`` -> ``core_v1``; ``...apis.meta.v1.ObjectMeta`` -> ``meta_v1``."""
    parts = name.split(".")
    return f"{parts[-3]}_{parts[-2]}".replace("-", "_")


def _refs(schema: dict[str, Any]) -> set[str]:
    """The definitions one property's schema names (itself, its items', its values')."""
    if "$ref" in schema:
        return {schema["$ref"].rsplit("/", 1)[-1]}
    found: set[str] = set()
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            found |= _refs(schema[key])
    return found


def _first_sentence(text: str) -> str:
    text = " ".join(text.split())
    match = re.match(r"(.+?\.)(\s|$)", text)
    return match.group(1) if match else text


def _kinds(spec: dict[str, Any]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Every kind the API serves, by (group, version, kind): its plural and whether it is namespaced."""
    kinds: dict[tuple[str, str, str], dict[str, Any]] = {}
    status: set[tuple[str, str, str]] = set()
    for path, item in spec["paths"].items():
        for operation in item.values():
            if (
                _STATUS.match(path)
                and isinstance(operation, dict)
                and operation.get("x-kubernetes-action") == "put"
            ):
                gvk = operation["x-kubernetes-group-version-kind"]
                status.add((gvk["group"], gvk["version"], gvk["kind"]))
        match = _PATH.match(path)
        if not match:
            continue
        for operation in item.values():
            if not isinstance(operation, dict) or operation.get("x-kubernetes-action") not in (
                "list",
                "post",
            ):
                continue
            gvk = operation["x-kubernetes-group-version-kind"]
            entry = kinds.setdefault((gvk["group"], gvk["version"], gvk["kind"]), {"namespaced": False})
            entry["plural"] = match["plural"]
            entry["namespaced"] = entry["namespaced"] or bool(match["ns"])
    for gvk in status & kinds.keys():
        kinds[gvk]["status"] = True
    return kinds


def extract(spec: dict[str, Any], source: str) -> dict[str, Any]:
    """The closure of ``ROOTS`` in ``spec``, trimmed to what ``render`` reads."""
    definitions = spec["definitions"]
    kinds = _kinds(spec)
    todo, seen = list(ROOTS), set()
    while todo:
        name = todo.pop()
        if name in seen or name in INLINE:
            continue
        seen.add(name)
        for schema in definitions[name].get("properties", {}).values():
            todo.extend(_refs(schema))
    closure: dict[str, Any] = {}
    for name in sorted(seen):
        definition = definitions[name]
        entry: dict[str, Any] = {
            "description": _first_sentence(definition.get("description", "")),
            "required": [
                field for field in definition.get("required", []) if field not in OPTIONAL.get(name, ())
            ],
            "properties": {
                field: {
                    key: value
                    for key, value in schema.items()
                    if key in ("$ref", "type", "format", "items", "additionalProperties")
                }
                for field, schema in definition.get("properties", {}).items()
            },
        }
        gvks = definition.get("x-kubernetes-group-version-kind", [])
        if len(gvks) == 1:
            gvk = gvks[0]
            entry["gvk"] = [gvk["group"], gvk["version"], gvk["kind"]]
            served = kinds.get((gvk["group"], gvk["version"], gvk["kind"]))
            if served:
                entry["resource"] = {
                    key: served[key] for key in ("plural", "namespaced", "status") if key in served
                }
        closure[name] = entry
    return {"source": source, "definitions": closure}


class _Module:
    """The text of one generated module and the imports it needs."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.imports: set[str] = set()
        self.modules: set[str] = set()
        self.classes: list[str] = []


def _type(schema: dict[str, Any], module: _Module, shadowed: bool) -> str:
    def builtin(name: str) -> str:
        return f"builtins.{name}" if shadowed else name

    if "$ref" in schema:
        target = schema["$ref"].rsplit("/", 1)[-1]
        if target in INLINE:
            text = INLINE[target]
            if "datetime" in text:
                module.imports.add("from datetime import datetime")
            if "Any" in text:
                module.imports.add("from typing import Any")
            return " | ".join(
                builtin(part) if part in _BUILTINS else part for part in text.split(" | ")
            ).replace("dict[str, Any]", f"{builtin('dict')}[{builtin('str')}, Any]")
        other = module_of(target)
        cls = target.rsplit(".", 1)[-1]
        if other == module.name:
            return cls
        module.modules.add(other)
        return f"{other}.{cls}"
    kind = schema.get("type")
    if kind == "array":
        return f"{builtin('list')}[{_type(schema['items'], module, shadowed)}]"
    if kind == "object":
        value = schema.get("additionalProperties")
        if isinstance(value, dict):
            return f"{builtin('dict')}[{builtin('str')}, {_type(value, module, shadowed)}]"
        module.imports.add("from typing import Any")
        return f"{builtin('dict')}[{builtin('str')}, Any]"
    scalar = {"string": "str", "integer": "int", "number": "float", "boolean": "bool"}.get(kind or "")
    if scalar is None:
        module.imports.add("from typing import Any")
        return "Any"
    return builtin(scalar)


def _q(text: str) -> str:
    """A string literal in ruff's style (double quotes)."""
    return json.dumps(text)


def _attribute(field: str) -> str:
    """A Python name for a wire field: keywords get a ``_`` suffix, ``$x`` becomes ``d_x``."""
    if field.startswith("$"):
        return "d_" + field[1:]
    name = field.replace("-", "_")
    return name + "_" if keyword.iskeyword(name) else name


def _class(name: str, definition: dict[str, Any], module: _Module) -> str:
    cls = name.rsplit(".", 1)[-1]
    properties: dict[str, Any] = definition["properties"]
    shadowed = any(_attribute(field) in (*_BUILTINS, "datetime", "Any") for field in properties)
    if shadowed:
        module.imports.add("import builtins")
    required = [field for field in properties if field in definition["required"]]
    optional = [field for field in properties if field not in definition["required"]]
    lines = [f"class {cls}(Model, kw_only=True):"]
    description = definition["description"].replace("\\", "\\\\").replace('"', "'") or f"{cls}."
    lines.append(f'    """{description}"""')
    lines.append("")
    resource = definition.get("resource")
    if resource:
        group, version, kind = definition["gvk"]
        module.imports.add("from typing import ClassVar")
        module.imports.add(_API_IMPORT)
        lines.append(
            f"    _api_info: ClassVar[ApiInfo] = ApiInfo(\n        group={_q(group)}, version={_q(version)}, "
            f"kind={_q(kind)}, plural={_q(resource['plural'])}, "
            f"namespaced={resource['namespaced']!r}\n    )"
        )
        if resource.get("status"):
            lines.append(f"    #: The ``status`` subresource (``{cls}.Status``).")
            lines.append(f"    Status: ClassVar[type[{cls}StatusResource]]")
        lines.append("")
    for field in required + optional:
        attribute = _attribute(field)
        annotation = _type(properties[field], module, shadowed)
        if field in required:
            value = f" = msgspec.field(name={_q(field)})" if attribute != field else ""
        else:
            annotation += " | None"
            value = f" = msgspec.field(name={_q(field)}, default=None)" if attribute != field else " = None"
        if "msgspec.field" in value:
            module.imports.add("import msgspec")
        lines.append(f"    {attribute}: {annotation}{value}")
    if not properties:
        lines.append("    pass")
    gvk = definition.get("gvk")
    if gvk and {"apiVersion", "kind"} <= properties.keys():
        api_version = f"{gvk[0]}/{gvk[1]}" if gvk[0] else gvk[1]
        lines += [
            "",
            "    def __post_init__(self) -> None:",
            '        """Stamp the type, so that an encoded object always says what it is."""',
            f"        self.apiVersion = {_q(api_version)}",
            f"        self.kind = {_q(gvk[2])}",
        ]
    if resource and resource.get("status"):
        group, version, kind = definition["gvk"]
        lines += [
            "",
            "",
            f"class {cls}StatusResource({cls}, kw_only=True):",
            f'    """A {cls} read and written at its ``status`` subresource."""',
            "",
            f"    _api_info: ClassVar[ApiInfo] = ApiInfo(\n        group={_q(group)}, version={_q(version)}, "
            f"kind={_q(kind)}, plural={_q(resource['plural'])}, "
            f'namespaced={resource["namespaced"]!r}, subresource="status"\n    )',
            "",
            "",
            f"{cls}.Status = {cls}StatusResource",
        ]
    return "\n".join(lines)


def _imports(lines: Iterable[str]) -> list[str]:
    """One import block as ruff sorts it: ``import x`` first, then one ``from x import a, b`` per module."""
    plain: list[str] = []
    names: dict[str, set[str]] = {}
    for line in sorted(set(lines)):
        if line.startswith("import "):
            plain.append(line)
        else:
            source, name = line[len("from ") :].split(" import ")
            names.setdefault(source, set()).add(name)
    return plain + [
        f"from {source} import {', '.join(sorted(found))}" for source, found in sorted(names.items())
    ]


def render(closure: dict[str, Any]) -> dict[str, str]:
    """The generated modules' text by file name, ``__init__.py`` included."""
    modules: dict[str, _Module] = {}
    for name, definition in closure["definitions"].items():
        module = modules.setdefault(module_of(name), _Module(module_of(name)))
        module.classes.append(_class(name, definition, module))
    header = (
        "Generated by tools/kubemodels/generate.py (make kubemodels) from {source}; do not edit."
    ).format(source=closure["source"])
    files: dict[str, str] = {}
    for name, module in sorted(modules.items()):
        group_version = name.rsplit("_", 1)
        stdlib = _imports(
            line for line in module.imports if not line.startswith(("import msgspec", "from imexdra"))
        )
        third = _imports(line for line in module.imports if line.startswith("import msgspec"))
        ours = _imports(
            [f"from {PACKAGE} import {other}" for other in module.modules]
            + [line for line in module.imports if line.startswith("from imexdra")]
            + ["from imexdra.common.kube.resource import Model"]
        )
        blocks = ["\n".join(block) for block in (stdlib, third, ours) if block]
        text = (
            f'"""Kubernetes {group_version[0]}/{group_version[1]} models.\n\n{header}\n"""\n\n'
            "from __future__ import annotations\n\n"
            + "\n\n".join(blocks)
            + "\n\n\n"
            + "\n\n\n".join(module.classes)
            + "\n"
        )
        files[f"{name}.py"] = text
    files["__init__.py"] = (
        '"""Kubernetes API models: msgspec Structs for the kinds we use and what they contain.\n\n'
        f"{header}\n" + '"""\n'
    )
    return files


def spec_path() -> Path:
    """swagger.json of tools/k8s/versions.env's KUBE_VERSION in the Go module cache."""
    versions = (TOP / "tools" / "k8s" / "versions.env").read_text()
    version = re.search(r"^KUBE_VERSION=(\S+)$", versions, re.MULTILINE)
    if version is None:
        raise SystemExit("tools/k8s/versions.env has no KUBE_VERSION")
    cache = os.environ.get("GOMODCACHE") or (
        subprocess.run(["go", "env", "GOMODCACHE"], check=True, capture_output=True, text=True).stdout.strip()
        if shutil.which("go")
        else str(Path.home() / "go" / "pkg" / "mod")  # Go's default, for a machine without go on PATH
    )
    return Path(cache) / f"k8s.io/kubernetes@v{version[1]}" / "api/openapi-spec/swagger.json"


def source_name(path: Path) -> str:
    """The spec's name without this machine's module cache prefix."""
    parts = path.parts
    for index, part in enumerate(parts):
        if part.startswith("kubernetes@"):
            return "k8s.io/" + "/".join(parts[index:])
    return str(path)


def main() -> None:
    """Extract the closure from the spec (``--spec``, default the module cache's) and render it."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--spec", type=Path, help="swagger.json (default: the Go module cache's)")
    parser.add_argument("--from-closure", action="store_true", help="render closure.json again only")
    args = parser.parse_args()
    if args.from_closure:
        closure = json.loads(CLOSURE.read_text())
    else:
        path = args.spec or spec_path()
        if not path.is_file():
            raise SystemExit(
                f"{path} not found: make k8s downloads Kubernetes' module into the Go module cache"
            )
        closure = extract(json.loads(path.read_text()), source_name(path))
        CLOSURE.write_text(json.dumps(closure, indent=1, sort_keys=True) + "\n")
    files = render(closure)
    for old in OUT.glob("*.py"):
        old.unlink()
    OUT.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (OUT / name).write_text(text)
    print(
        f"[kubemodels] {len(closure['definitions'])} definitions, "
        f"{len(files)} files in {OUT.relative_to(TOP)}"
    )


if __name__ == "__main__":
    sys.exit(main())
