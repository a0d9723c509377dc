"""Where the repository's files are, named once for every tier."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHART_DIR = REPO / "deployments" / "helm" / "imexdra"
CRD_DIR = CHART_DIR / "crds"
PYPROJECT = REPO / "pyproject.toml"
TOOLS = REPO / "tools"
BENCH = REPO / "bench"
RESULTS = BENCH / "results"
