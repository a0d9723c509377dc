"""Every third-party package the product imports is a pinned dependency of its own (issue 19 item 6).

A package reached only through another's dependencies (``hpack`` under h2) would change
under us when that one moves; pyproject.toml names it with an exact version instead. Imports are read
from the source with ``ast``; ``importlib.metadata.packages_distributions`` maps each top-level module
to the distribution that installs it.
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
import tomllib

from tests.support.paths import REPO

SOURCE = REPO / "src" / "imexdra"


def imported_top_levels() -> set[str]:
    """Top-level module names ``src/imexdra`` imports, absolute imports only."""
    names: set[str] = set()
    for path in SOURCE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def declared() -> dict[str, str]:
    """pyproject's runtime dependencies: normalized distribution name → its requirement string."""
    requirements = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    found = {}
    for requirement in requirements:
        name = re.split(r"[=<>!~\[; ]", requirement, maxsplit=1)[0]
        found[re.sub(r"[-_.]+", "-", name).lower()] = requirement
    return found


def test_every_imported_package_is_declared_with_an_exact_version() -> None:
    """Each third-party module imported by the product maps to a dependency pinned with ``==``."""
    distributions = importlib.metadata.packages_distributions()
    third_party = sorted(
        name for name in imported_top_levels() if name not in sys.stdlib_module_names and name != "imexdra"
    )
    requirements = declared()
    missing, unpinned = [], []
    for module in third_party:
        names = {re.sub(r"[-_.]+", "-", d).lower() for d in distributions.get(module, [])}
        assert names, f"{module} is imported but no installed distribution provides it"
        matches = [requirements[n] for n in names if n in requirements]
        if not matches:
            missing.append(f"{module} (from {', '.join(sorted(names))})")
        elif not all("==" in m for m in matches):
            unpinned.extend(matches)
    assert not missing, f"imported but not declared in pyproject.toml: {missing}"
    assert not unpinned, f"declared without an exact version: {unpinned}"
