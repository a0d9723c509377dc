"""What ``helm install`` prints after an install (templates/NOTES.txt), per IMEX mode and isolation.

Helm renders NOTES.txt only on install, which needs a cluster; the test renders a copy of the chart in
which an ordinary template renders the notes' text (``tpl``) into a YAML string, with the same values.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from imexdra_sim.localcluster.binaries import KUBE_VERSION
from tests.unit.chart.helm import CHART_DIR, NAMESPACE, helm

HOST_MANAGED = {"featureGates": {"HostManagedIMEX": True}}
NOTES_AS_TEMPLATE = "templates/notes-rendered.yaml"
RENDER_NOTES = 'notes: {{ tpl (.Files.Get "notes-source.txt") . | toJson }}\n'


def notes(tmp_path: Path, values: dict[str, Any]) -> str:
    """The notes helm would print for an install with ``values``."""
    chart = tmp_path / "imexdra"
    shutil.copytree(CHART_DIR, chart)
    shutil.copy(chart / "templates" / "NOTES.txt", chart / "notes-source.txt")
    (chart / NOTES_AS_TEMPLATE).write_text(RENDER_NOTES)
    result = helm(
        "template",
        "r",
        str(chart),
        "--namespace",
        NAMESPACE,
        f"--kube-version={KUBE_VERSION}",
        "--show-only",
        NOTES_AS_TEMPLATE,
        "-f",
        "-",
        input=yaml.safe_dump(values),
    )
    assert result.returncode == 0, result.stderr
    rendered: str = yaml.safe_load(result.stdout)["notes"]
    return " ".join(rendered.split())


@pytest.mark.parametrize(
    ("values", "says", "never"),
    [
        pytest.param({}, "IMEX mode: driver-managed", "host-managed", id="driver-managed"),
        pytest.param(
            HOST_MANAGED,
            "Every ComputeDomain of one host IMEX domain gets channel 0",
            "channel of its own",
            id="host-managed-domain-isolation",
        ),
        pytest.param(
            {**HOST_MANAGED, "resources": {"computeDomains": {"imex": {"isolation": "channel"}}}},
            "Each ComputeDomain gets an IMEX channel of its own (1 to 2047, DeviceClass "
            "compute-domain-channel.nvidia.com)",
            "at most one ComputeDomain per host IMEX domain",
            id="host-managed-channel-isolation",
        ),
    ],
)
def test_notes_describe_the_installed_mode(
    tmp_path: Path, values: dict[str, Any], says: str, never: str
) -> None:
    """The notes say what this install does, and nothing that holds only for another mode."""
    text = notes(tmp_path, values)
    assert says in text
    assert never not in text
