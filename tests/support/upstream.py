"""Upstream's chart values as an operator moving from upstream has them (tests/data), in one place."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

UPSTREAM_VALUES_FILE = Path(__file__).parents[1] / "data" / "upstream-default-values.yaml"
"""Every key of upstream's chart values at its default (the file's header says which upstream)."""


def upstream_values() -> dict[str, Any]:
    """A fresh copy of that file's values."""
    values: dict[str, Any] = yaml.safe_load(UPSTREAM_VALUES_FILE.read_text())
    return values
