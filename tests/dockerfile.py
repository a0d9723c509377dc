"""Reading deployments/container/Dockerfile as instructions, for the tests that check the image recipe."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

DOCKERFILE = Path(__file__).parents[1] / "deployments/container/Dockerfile"


def instructions(path: Path = DOCKERFILE) -> Iterator[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` of a Dockerfile, continuation lines joined, comments dropped."""
    logical = ""
    for line in path.read_text().splitlines():
        if line.lstrip().startswith("#"):
            continue
        logical += line.rstrip("\\").strip() + " " if line.endswith("\\") else line.strip()
        if not line.endswith("\\"):
            if logical:
                keyword, _, rest = logical.partition(" ")
                yield keyword.upper(), rest.strip()
            logical = ""
