"""The suite's own rules: shared code lives in support modules, never in a conftest or a test module."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.paths import REPO

TEST_FILES = sorted((REPO / "tests").rglob("*.py"))


def _imported_modules(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
        elif isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
    return names


@pytest.mark.parametrize("path", TEST_FILES, ids=lambda path: str(path.relative_to(REPO)))
def test_no_module_imports_a_conftest_or_a_test_module(path: Path) -> None:
    """A conftest holds fixtures and hooks only; a test module is imported by pytest alone."""
    offending = [
        name
        for name in _imported_modules(path)
        if name.startswith("tests.") and name.rsplit(".", 1)[-1].startswith(("conftest", "test_"))
    ]
    assert offending == [], (
        f"{path.relative_to(REPO)} imports {offending}: move what it needs to tests/support"
    )
