"""The project's pages hold together: links resolve, the README lists every page of docs/.

A moved section or a renamed page breaks a link somewhere; these tests name it. Links to the web are
not followed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.paths import REPO

PAGES = sorted(
    [
        REPO / "README.md",
        REPO / "CHANGELOG.md",
        REPO / "DEVELOPERS.md",
        REPO / "bench/README.md",
        REPO / "deployments/helm/imexdra/README.md",
        REPO / "examples/README.md",
        *(REPO / "docs").glob("*.md"),
    ]
)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def links(page: Path) -> list[str]:
    """The Markdown link targets of ``page`` outside code blocks, web addresses left out."""
    text = FENCE.sub("", page.read_text())
    return [t for t in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def anchors(page: Path) -> set[str]:
    """The heading anchors GitHub makes for ``page``: lower case, punctuation dropped, spaces as dashes."""
    text = FENCE.sub("", page.read_text())
    headings = re.findall(r"^#+\s+(.*)$", text, re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(REPO).as_posix() for p in PAGES])
def test_every_link_resolves(page: Path) -> None:
    """Each relative link names a file of the repository and, if it has one, a heading of that page."""
    broken = []
    for target in links(page):
        path, _, fragment = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists() or (
            fragment and resolved.suffix == ".md" and fragment not in anchors(resolved)
        ):
            broken.append(target)
    assert broken == []


def test_readme_lists_every_docs_page() -> None:
    """The README's documentation table has one row for each file in docs/, and no row for a missing one."""
    listed = [t for t in links(REPO / "README.md") if t.startswith("docs/") and "#" not in t]
    rows = re.findall(r"^\| \[(docs/[^\]]+)\]", (REPO / "README.md").read_text(), re.MULTILINE)
    present = sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md"))
    assert sorted(rows) == present
    assert set(listed) >= set(present)


def test_readme_figures_name_their_result_files() -> None:
    """Every result file the README's benchmark tables link to is committed and is JSON."""
    section = (REPO / "README.md").read_text().split("## Benchmarks", 1)[1].split("\n## ", 1)[0]
    files = re.findall(r"\]\((bench/results/[^)]+)\)", section)
    assert files
    for name in files:
        assert name.endswith(".json"), name
        assert (REPO / name).is_file(), name
