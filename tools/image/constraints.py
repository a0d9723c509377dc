"""Write or check deployments/container/constraints.txt: every package the image's venv installs, pinned.

pyproject.toml pins imexdra's direct dependencies; their own dependencies (grpclib's
multidict, h2's hpack, ...) float, so two image builds a month apart could differ. Both image recipes
install the wheel with ``--constraint constraints.txt``, and this file is the closure of the runtime
dependencies as installed in the development venv the tests run in: the image runs the versions the
tests ran (docs/node-runtime.md, "The project's image").

Usage (from the repository root, with the dev venv's python):
    python tools/image/constraints.py          # rewrite the file from the venv
    python tools/image/constraints.py --check  # exit 1 and show the difference if it is stale
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import re
import sys
import tomllib
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
CONSTRAINTS = REPO / "deployments/container/constraints.txt"
HEADER = (
    "# The image venv's packages, pinned: the closure of imexdra's runtime dependencies as installed in\n"
    "# the venv the tests run in. Written by tools/image/constraints.py; do not edit by hand.\n"
)


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def closure() -> dict[str, str]:
    """Every distribution imexdra needs at run time (no extras), name -> version installed here.

    The roots are pyproject.toml's ``[project] dependencies`` (not the installed imexdra's metadata,
    which an editable install leaves as it was when it was made). A dependency asked for with extras
    (``httpx2[http2,ws]``) brings the requirements of those extras too.
    """
    environment = default_environment()
    roots = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    found: dict[str, str] = {}
    visited: set[tuple[str, str]] = set()
    pending = [Requirement(text) for text in roots]
    while pending:
        requirement = pending.pop()
        name = _canonical(requirement.name)
        wanted = [e for e in ("", *sorted(requirement.extras)) if (name, e) not in visited]
        if not wanted:
            continue
        visited.update((name, e) for e in wanted)
        distribution = metadata.distribution(requirement.name)
        found[name] = distribution.version
        for text in distribution.requires or ():
            nested = Requirement(text)
            if nested.marker is None or any(
                nested.marker.evaluate({**environment, "extra": e}) for e in wanted
            ):
                pending.append(nested)
    return found


def render(pins: dict[str, str]) -> str:
    """The constraints file for ``pins``, sorted by name."""
    return HEADER + "".join(f"{name}=={version}\n" for name, version in sorted(pins.items()))


def main() -> int:
    """Rewrite the file, or with --check compare it with the venv."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the file differs from the venv")
    expected = render(closure())
    if parser.parse_args().check:
        current = CONSTRAINTS.read_text() if CONSTRAINTS.exists() else ""
        if current != expected:
            sys.stderr.write(f"{CONSTRAINTS} is stale; run python tools/image/constraints.py\n")
            sys.stderr.write(f"want:\n{expected}")
            return 1
        return 0
    CONSTRAINTS.write_text(expected)
    return 0


if __name__ == "__main__":
    sys.exit(main())
