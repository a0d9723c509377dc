"""Rendering the chart as it will render once channel isolation is no longer refused at install.

``validation.yaml`` refuses ``imex.isolation=channel`` with one check marked "being built" (issue #17)
until the kubelet plugin implements it too; the controller's side of the chart (its RBAC, the channel
DeviceClass, the channel count) is already templated and must be tested now. This renders a copy of
the chart with that one ``fail`` line left out — nothing else differs. Once the check is deleted the
copy equals the chart and this module can go.
"""

from __future__ import annotations

import functools
import json
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from tests.unit.chart.helm import CHART_DIR, KUBE_VERSION, NAMESPACE, RELEASE, Rendered, helm

#: The start of the refusal line the last slice of issue #17 deletes.
BEING_BUILT = '{{- fail "resources.computeDomains.imex.isolation=channel: channel isolation is being built'


@functools.cache
def chart_copy() -> Path:
    """A copy of the chart without the being-built refusal (made once per test session)."""
    copy = Path(tempfile.mkdtemp(prefix="imexdra-chart-")) / "imexdra"
    shutil.copytree(CHART_DIR, copy)
    validation = copy / "templates" / "validation.yaml"
    lines = validation.read_text().splitlines(keepends=True)
    kept = [line for line in lines if not line.startswith(BEING_BUILT)]
    assert len(lines) - len(kept) <= 1, "more than one being-built refusal"
    validation.write_text("".join(kept))
    return copy


@functools.lru_cache(maxsize=16)
def _render(values_json: str) -> tuple[int, str, str]:
    args = [
        "template",
        RELEASE,
        str(chart_copy()),
        "--namespace",
        NAMESPACE,
        f"--kube-version={KUBE_VERSION}",
    ]
    result = helm(*args, "-f", "-", input=values_json)
    return result.returncode, result.stdout, result.stderr


def render(values: Mapping[str, Any]) -> Rendered:
    """``helm template`` of the copy with ``values``; fails on helm errors."""
    code, stdout, stderr = _render(json.dumps(values, sort_keys=True))
    assert code == 0, f"helm template failed: {stderr}"
    return Rendered(objects=tuple(doc for doc in yaml.safe_load_all(stdout) if doc), manifest=stdout)


def render_error(values: Mapping[str, Any]) -> str:
    """helm's error for ``values``, which must make rendering the copy fail."""
    code, _stdout, stderr = _render(json.dumps(values, sort_keys=True))
    assert code != 0, f"helm template unexpectedly succeeded with {values}"
    return stderr
