"""docs/architecture.md §9 maps every module that exists and nothing that does not.

The map is where a new engineer looks a module up, so a module added without its row, or a row left
behind by a move, makes it lie. Python modules are compared by dotted name with the files under
``src/imexdra`` and ``sim/src/imexdra_sim`` (a package is its ``__init__``; generated code counts as
its one package: the protobuf stubs ``imexdra.dra._pb``, the API models ``imexdra.common.kube.models``);
the tests, benchmarks and tools are compared by their top-level entries.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from tests.support.paths import REPO

PAGE = REPO / "docs" / "architecture.md"
PACKAGES = (REPO / "src" / "imexdra", REPO / "sim" / "src" / "imexdra_sim")
GENERATED = ("imexdra.dra._pb", "imexdra.common.kube.models")
# The folders whose top-level entries the map names one by one.
FOLDERS = ("tests", "bench", "tools")
ROW = re.compile(r"^\| `([^`]+)` \|", re.MULTILINE)


def map_rows() -> list[str]:
    """The first cell of every table row in the page's module-map section, in order."""
    text = PAGE.read_text()
    start = text.index("\n## 9. Module map\n")
    end = text.find("\n## ", start + 1)
    return ROW.findall(text[start : end if end != -1 else len(text)])


def module_name(package_dir: Path, path: Path) -> str:
    """The dotted name of the module at ``path`` inside the package at ``package_dir``."""
    parts = [package_dir.name, *path.relative_to(package_dir).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules_on_disk() -> set[str]:
    """Every module of the two packages, each generated package as itself alone."""
    names = set()
    for package_dir in PACKAGES:
        for path in package_dir.rglob("*.py"):
            name = module_name(package_dir, path)
            if not name.startswith(tuple(f"{package}." for package in GENERATED)):
                names.add(name)
    return names


def top_level_entries() -> set[str]:
    """The entries of the tests, bench and tools folders as the map spells them (folders end in /)."""
    entries = set()
    for folder in FOLDERS:
        for path in (REPO / folder).iterdir():
            if path.name.startswith(".") or path.name in {"__init__.py", "__pycache__"}:
                continue
            entries.add(f"{folder}/{path.name}/" if path.is_dir() else f"{folder}/{path.name}")
    return entries


def test_the_map_names_every_module_once_and_no_other() -> None:
    """Each module of src/imexdra and sim/src/imexdra_sim has one row; no row names a module that is gone."""
    rows = [row for row in map_rows() if row.split(".")[0] in {"imexdra", "imexdra_sim"}]
    on_disk = modules_on_disk()
    assert sorted(set(on_disk) - set(rows)) == [], "modules without a row in docs/architecture.md §9"
    assert sorted(set(rows) - on_disk) == [], "rows of docs/architecture.md §9 naming no module"
    assert [name for name, count in Counter(rows).items() if count > 1] == []


def test_the_map_names_every_top_level_entry_of_tests_bench_and_tools() -> None:
    """Each file and folder directly under tests/, bench/ and tools/ has a row, and every such row exists."""
    rows = {row for row in map_rows() if row.split("/")[0] in FOLDERS}
    entries = top_level_entries()
    assert sorted(entries - rows) == [], "entries without a row in docs/architecture.md §9"
    assert sorted(rows - entries) == [], "rows of docs/architecture.md §9 naming nothing on disk"


def test_every_row_of_the_map_is_a_module_or_a_mapped_folder_entry() -> None:
    """No row falls outside both checks above (a typo such as ``imexdr.api`` would otherwise go unseen)."""
    stray = [
        row
        for row in map_rows()
        if row.split(".")[0] not in {"imexdra", "imexdra_sim"} and row.split("/")[0] not in FOLDERS
    ]
    assert stray == []
