"""The manifests of the repository's ``examples/`` folder, loaded for the demo and the tests.

``examples/`` is the one copy of every example workload (the seeds' and upstream-style demo specs):
plain YAML an ML engineer applies with ``kubectl apply -n <namespace> -f``. The demo and the e2e tier
load those files rather than keeping objects of their own, so an example that stopped working fails
a test (``tests/e2e/test_examples.py``; ``tests/unit/test_examples.py`` checks every file's kinds).
Like the chart (``rack.CHART``), the folder is found from this package's place in a checkout: imexdra-sim
is only ever installed editable from one (docs/architecture.md §2.3).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def files() -> list[Path]:
    """Every example manifest, by name."""
    return sorted(EXAMPLES.glob("*.yaml"))


def load(name: str, namespace: str | None = None) -> list[dict[str, Any]]:
    """The objects of ``examples/<name>``, in the file's order.

    Each is put in ``namespace`` when one is given, as ``kubectl apply -n`` puts a manifest naming none.
    """
    objects = [item for item in yaml.safe_load_all((EXAMPLES / name).read_text()) if item]
    if namespace is not None:
        for item in objects:
            item["metadata"]["namespace"] = namespace
    return objects
