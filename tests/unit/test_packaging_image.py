"""The component image's recipe, checked without a container engine (none on the CI machine).

What can be checked statically: every file the Dockerfile copies from the build context exists and
survives /.dockerignore, the context holds everything the wheel is built from and nothing else of
note, the smoke test runs exactly the package's console scripts, and the image version is the
package's. That the recipe's pip steps work is tests/integration/test_packaging.py's job.
"""

from __future__ import annotations

import re
import shlex
import tomllib

import pytest

from tests.dockerfile import instructions
from tests.support.paths import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def _pattern(glob: str) -> re.Pattern[str]:
    """A .dockerignore pattern (Go filepath.Match plus ``**``) as a regex over slash paths."""
    regex = ""
    index = 0
    while index < len(glob):
        if glob.startswith("**/", index):
            regex, index = regex + "(?:.*/)?", index + 3
        elif glob.startswith("**", index):
            regex, index = regex + ".*", index + 2
        elif glob[index] == "*":
            regex, index = regex + "[^/]*", index + 1
        elif glob[index] == "?":
            regex, index = regex + "[^/]", index + 1
        else:
            regex, index = regex + re.escape(glob[index]), index + 1
    return re.compile(regex)


def in_context(path: str) -> bool:
    """Whether /.dockerignore keeps ``path`` (relative) in the build context; the last match wins."""
    rules = []
    for raw in (REPO / ".dockerignore").read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            rules.append((line.startswith("!"), _pattern(line.lstrip("!").strip("/"))))
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]  # a directory match covers its files
    kept = True
    for negated, pattern in rules:
        if any(pattern.fullmatch(candidate) for candidate in candidates):
            kept = negated
    return kept


def test_copied_sources_exist_in_the_build_context() -> None:
    """Each ``COPY`` from the context names an existing path that .dockerignore keeps."""
    copies = [args for keyword, args in instructions() if keyword == "COPY" and "--from=" not in args]
    assert copies, "the Dockerfile copies the project in"
    for args in copies:
        *sources, _destination = shlex.split(args)
        for source in sources:
            assert (REPO / source).exists(), source
            assert in_context(source), f"{source} is excluded by .dockerignore"


@pytest.mark.parametrize(
    ("path", "kept"),
    [
        pytest.param("pyproject.toml", True, id="pyproject"),
        pytest.param("README.md", True, id="readme-for-metadata"),
        pytest.param("src/imexdra/controller/main.py", True, id="sources"),
        pytest.param("src/imexdra/dra/_pb/dra_v1_pb2.pyi", True, id="stubs"),
        pytest.param("src/imexdra/py.typed", True, id="typed-marker"),
        pytest.param("src/imexdra/__pycache__/x.cpython-311.pyc", False, id="bytecode"),
        pytest.param(".venv/bin/python", False, id="venv"),
        pytest.param(".git/HEAD", False, id="git"),
        pytest.param("tests/unit/test_packaging_image.py", False, id="tests"),
    ],
)
def test_dockerignore_keeps_only_the_wheel_inputs(path: str, kept: bool) -> None:
    """The context is the wheel's inputs: sources, stubs and metadata, without venvs, git or tests."""
    assert in_context(path) is kept


def test_every_package_file_is_in_the_context() -> None:
    """No file of the package (what hatchling puts into the wheel) is filtered out of the context."""
    files = [p.relative_to(REPO).as_posix() for p in (REPO / "src/imexdra").rglob("*") if p.is_file()]
    missing = [f for f in files if "__pycache__" not in f and not in_context(f)]
    assert missing == []


def test_smoke_test_runs_every_console_script() -> None:
    """The build's smoke test calls ``--help`` of exactly the package's console scripts."""
    (run,) = [args for keyword, args in instructions() if keyword == "RUN" and "--help" in args]
    loop = re.search(r"for command in (.*?); do", run)
    assert loop is not None
    assert set(loop.group(1).split()) == set(PYPROJECT["project"]["scripts"])


def test_image_version_and_venv_on_path() -> None:
    """The image's VERSION default is the package version; the venv's bin is first on PATH."""
    version = [a for k, a in instructions() if k == "ARG" and a.startswith("VERSION=")]
    assert version == [f"VERSION={PYPROJECT['project']['version']}"]
    envs = " ".join(a for k, a in instructions() if k == "ENV")
    assert "PATH=/opt/imexdra/bin:$PATH" in envs
    assert "NVIDIA_VISIBLE_DEVICES=all" in envs
