"""Compare upstream's chart values keys with the key list imexdra's tests install (a maintainer's check).

    .venv/bin/python tools/upstream/values_keys.py <checkout of NVIDIA/k8s-dra-driver-gpu>

``tests/data/upstream-default-values.yaml`` is written out by us from upstream's key list; this says
which keys of the checkout's ``deployments/helm/*/values.yaml`` it lacks (exit 1: classify them in
tests/unit/chart/test_chart_upstream_keys.py and docs/compatibility.md) and which it has that the
checkout does not (keys of a newer upstream than the checkout, or ones upstream dropped). Defaults
that differ are printed too. Nothing is copied from the checkout.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

OURS = Path(__file__).parents[2] / "tests/data/upstream-default-values.yaml"


def leaves(values: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted path -> value of every leaf (an empty mapping is a leaf)."""
    if not isinstance(values, dict) or not values:
        return {prefix.rstrip("."): values}
    found: dict[str, Any] = {}
    for key, value in values.items():
        found.update(leaves(value, f"{prefix}{key}."))
    return found


def main(checkout: Path) -> int:
    """Print the differences; 1 if the checkout has keys our list lacks."""
    [chart_values] = sorted(checkout.glob("deployments/helm/*/values.yaml"))
    theirs, ours = leaves(yaml.safe_load(chart_values.read_text())), leaves(yaml.safe_load(OURS.read_text()))
    missing = sorted(set(theirs) - set(ours))
    print(f"{chart_values}: {len(theirs)} keys; {OURS.name}: {len(ours)} keys")
    print("missing from ours:", missing or "none")
    print("only in ours:", sorted(set(ours) - set(theirs)) or "none")
    for key in sorted(set(theirs) & set(ours)):
        if theirs[key] != ours[key]:
            print(f"default differs: {key}: upstream {theirs[key]!r}, ours {ours[key]!r}")
    return 1 if missing else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(Path(sys.argv[1])))
