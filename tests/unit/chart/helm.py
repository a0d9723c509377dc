"""Rendering the chart with the real ``helm`` binary, and reading the rendered objects back.

Shared by the chart's unit tests and the integration tests that apply the rendered manifests. The
binary is the one ``tools/k8s/build.sh`` builds; ``--kube-version`` is passed because a helm built
without release ldflags assumes Kubernetes v1.20 and the chart needs >= 1.34.
"""

from __future__ import annotations

import copy
import functools
import json
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from imexdra_sim.localcluster.binaries import KUBE_VERSION, locate
from tests.support.paths import CHART_DIR

RELEASE = "imexdra"
NAMESPACE = "imexdra"

Object = dict[str, Any]
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def helm_binary() -> Path:
    """The helm binary next to the cluster binaries (``make k8s`` builds it)."""
    return locate().path("helm")


def helm(*args: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run helm; the caller checks the result."""
    return subprocess.run(
        [str(helm_binary()), *args], capture_output=True, text=True, input=input, timeout=120, check=False
    )


def _template_args(release: str, namespace: str, extra: tuple[str, ...]) -> list[str]:
    chart = ["template", release, str(CHART_DIR), "--namespace", namespace]
    return [*chart, f"--kube-version={KUBE_VERSION}", *extra]


@functools.lru_cache(maxsize=64)
def _render(values_json: str, release: str, namespace: str, extra: tuple[str, ...]) -> tuple[int, str, str]:
    result = helm(*_template_args(release, namespace, extra), "-f", "-", input=values_json)
    return result.returncode, result.stdout, result.stderr


@dataclass(frozen=True)
class Rendered:
    """The objects of one ``helm template`` run."""

    objects: tuple[Object, ...]
    manifest: str

    def of_kind(self, kind: str) -> list[Object]:
        """Every object of ``kind``."""
        return [obj for obj in self.objects if obj["kind"] == kind]

    def kinds(self) -> set[tuple[str, str]]:
        """``(kind, name)`` of every object."""
        return {(obj["kind"], obj["metadata"]["name"]) for obj in self.objects}

    def get(self, kind: str, name: str, namespace: str | None = None) -> Object:
        """The one object of ``kind`` called ``name`` (in ``namespace`` when given)."""
        found = [
            obj
            for obj in self.of_kind(kind)
            if obj["metadata"]["name"] == name
            and (namespace is None or obj["metadata"].get("namespace") == namespace)
        ]
        assert len(found) == 1, f"{len(found)} {kind} objects named {name}"
        return found[0]

    def container(self, kind: str, container: str) -> Object:
        """The container called ``container`` of the one workload of ``kind``."""
        (workload,) = self.of_kind(kind)
        for candidate in workload["spec"]["template"]["spec"]["containers"]:
            if candidate["name"] == container:
                return dict(candidate)
        raise KeyError(f"{kind} has no container {container}")

    def env(self, kind: str, container: str) -> dict[str, Any]:
        """A container's env: plain values as strings, downward-API entries as their ``valueFrom``."""
        env = self.container(kind, container).get("env", [])
        names = [entry["name"] for entry in env]
        assert len(names) == len(set(names)), f"duplicate env names in {kind}/{container}: {names}"
        return {entry["name"]: entry.get("value", entry.get("valueFrom")) for entry in env}


def render(
    values: Mapping[str, Any] | None = None,
    *,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
    extra: tuple[str, ...] = (),
) -> Rendered:
    """``helm template`` with ``values`` (cached: do not modify the objects); fails on helm errors."""
    return _parsed(json.dumps(values or {}, sort_keys=True), release, namespace, extra)


@functools.lru_cache(maxsize=64)
def _parsed(values_json: str, release: str, namespace: str, extra: tuple[str, ...]) -> Rendered:
    code, stdout, stderr = _render(values_json, release, namespace, extra)
    assert code == 0, f"helm template failed: {stderr}"
    objects = tuple(doc for doc in yaml.load_all(stdout, Loader=_LOADER) if doc)
    return Rendered(objects=objects, manifest=stdout)


def render_error(
    values: Mapping[str, Any] | None = None, *, namespace: str = NAMESPACE, extra: tuple[str, ...] = ()
) -> str:
    """helm's error message for ``values``, which must make rendering fail."""
    code, _stdout, stderr = _render(json.dumps(values or {}, sort_keys=True), RELEASE, namespace, extra)
    assert code != 0, f"helm template unexpectedly succeeded with {values}"
    return stderr


def nested(dotted: str, value: Any) -> Object:
    """``{"a": {"b": value}}`` from ``"a.b"`` (values overrides read like ``--set``)."""
    result: Any = value
    for key in reversed(dotted.split(".")):
        result = {key: result}
    assert isinstance(result, dict)
    return result


def merge(*overrides: Mapping[str, Any]) -> Object:
    """Deep-merge values overrides, later ones winning."""
    merged: Object = {}
    for override in overrides:
        _merge_into(merged, override)
    return merged


def _merge_into(target: Object, source: Mapping[str, Any]) -> None:
    for key, value in source.items():
        if isinstance(value, Mapping) and isinstance(target.get(key), dict):
            _merge_into(target[key], value)
        else:
            # A copy all the way down: merging into it later must never change the caller's values.
            target[key] = copy.deepcopy(value)


def default_values() -> Object:
    """The chart's values.yaml."""
    values: Object = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    return values


def walk(values: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    """Dotted paths of every leaf (and empty map) in ``values``."""
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            yield from walk(value, f"{path}.")
        else:
            yield path
