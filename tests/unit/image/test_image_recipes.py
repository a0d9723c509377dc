"""The component image's two recipes promise the same image, checked without a container engine.

deployments/container/Dockerfile (``docker build``) and tools/image/build.sh (debootstrap and a chroot,
for the local cluster's containerd nodes, where no registry and no Docker exist) must give the same
entry points, user, Python (Debian's python3 of bookworm), platforms (linux/amd64 and linux/arm64, one
image index), venv, environment and CMD. The shared values
live in tools/image/contract.env: build.sh sources it, the Dockerfile spells the values out. The
Dockerfile is parsed here; build.sh is asked for the arguments it builds with
(``--print-imexdra-config``: the same code path as a build, which stops before building anything). No
network, no Docker, no root.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass, field

import pytest
import yaml

from tests.dockerfile import instructions
from tests.support.paths import REPO

BUILD_SH = REPO / "tools/image/build.sh"
CONTRACT_ENV = REPO / "tools/image/contract.env"
CHART = REPO / "deployments/helm/imexdra"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
#: The Python each Debian suite ships as ``python3``.
DEBIAN_PYTHON = {"bookworm": "3.11"}
#: The glibc each Debian suite ships (libc6): the newest manylinux tag its Python takes.
DEBIAN_GLIBC = {"bookworm": "2.36"}
#: Architecture names that a recipe building every platform alike never spells out.
ARCH_WORDS = re.compile(r"amd64|arm64|x86[_-]64|aarch64|armv8", re.IGNORECASE)
LABEL = "org.opencontainers.image."


def read_contract() -> dict[str, str]:
    """contract.env's ``KEY='value'`` lines as a dict (shlex: the quoting bash would apply)."""
    values = {}
    for line in CONTRACT_ENV.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            (assignment,) = shlex.split(line)
            key, _, value = assignment.partition("=")
            values[key] = value
    return values


CONTRACT = read_contract()


def contract_env() -> dict[str, str]:
    """The image environment the contract promises besides PATH."""
    return dict(pair.split("=", 1) for pair in CONTRACT["IMAGE_ENV"].split())


@dataclass
class Stage:
    """One ``FROM`` stage of the Dockerfile: its base (ARGs resolved), name and instructions."""

    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        """The arguments of every instruction ``keyword`` of this stage."""
        return [args for key, args in self.instructions if key == keyword]


def dockerfile_stages() -> list[Stage]:
    """The Dockerfile's stages, continuation lines joined, comments dropped, global ARGs applied."""
    lines = list(instructions())
    global_args: dict[str, str] = {}
    stages: list[Stage] = []
    for keyword, args in lines:
        if keyword == "FROM":
            image, *alias = args.split()
            image = re.sub(r"\$\{(\w+)\}", lambda m: global_args[m.group(1)], image)
            stages.append(Stage(base=image, name=alias[1] if alias else None))
        elif stages:
            stages[-1].instructions.append((keyword, args))
        elif keyword == "ARG":
            name, _, default = args.partition("=")
            global_args[name] = default
    return stages


STAGES = dockerfile_stages()
FINAL = STAGES[-1]


def root_image(stage: Stage) -> str:
    """The registry image a stage finally rests on (following ``FROM <earlier stage>``)."""
    by_name = {s.name: s for s in STAGES if s.name}
    while stage.base in by_name:
        stage = by_name[stage.base]
    return stage.base


def dockerfile_env(stage: Stage) -> dict[str, str]:
    """The ``ENV key=value ...`` pairs of a stage."""
    pairs = [word.split("=", 1) for args in stage.all("ENV") for word in shlex.split(args)]
    return dict(pairs)


def smoke_loop(command: str) -> list[str]:
    """The commands of a ``for command in ...; do "$command" --help ...; done`` smoke test."""
    loop = re.search(r"for command in (.*?); do \"\$command\" --help", command)
    assert loop is not None, command
    return loop.group(1).split()


@dataclass
class BuildConfig:
    """What tools/image/build.sh builds the imexdra image with, as its --print-imexdra-config says."""

    lines: dict[str, list[str]]
    oci: dict[str, list[str]]

    def one(self, flag: str) -> str:
        """The single value of an ociarchive.py flag."""
        (value,) = self.oci[flag]
        return value


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> BuildConfig:
    """Run ``build.sh --print-imexdra-config`` against an empty cache; it must build nothing there."""
    cache = tmp_path_factory.mktemp("cache")
    result = subprocess.run(
        ["bash", str(BUILD_SH), "--print-imexdra-config"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        # The contract's platforms, whatever a developer's quicker local build asks for.
        env={
            **{k: v for k, v in os.environ.items() if k != "IMEXDRA_IMAGE_PLATFORMS"},
            "IMEXDRA_CACHE": str(cache),
            "PYTHON": sys.executable,
        },
    )
    assert result.returncode == 0, result.stderr
    assert list(cache.iterdir()) == [], "printing the config must not touch the cache"
    lines: dict[str, list[str]] = {}
    for line in result.stdout.splitlines():
        key, _, value = line.partition("\t")
        lines.setdefault(key, []).append(value)
    args = lines["oci"]
    assert len(args) % 2 == 0, args
    oci: dict[str, list[str]] = {}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        oci.setdefault(flag, []).append(value)
    return BuildConfig(lines, oci)


def test_contract_reads_the_same_in_bash() -> None:
    """Bash sourcing contract.env gets exactly the values Python reads (no expansions or quirks)."""
    script = 'source "$1"; shift; for k in "$@"; do printf "%s=%s\\0" "$k" "${!k}"; done'
    result = subprocess.run(
        ["bash", "-c", script, "bash", str(CONTRACT_ENV), *CONTRACT],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    pairs = [item.split("=", 1) for item in result.stdout.split("\0") if item]
    assert dict(pairs) == CONTRACT


def test_entry_points_are_the_console_scripts_in_both_smoke_tests(build: BuildConfig) -> None:
    """Both recipes' smoke tests run ``--help`` of exactly the package's console scripts."""
    scripts = CONTRACT["IMAGE_ENTRY_POINTS"].split()
    assert sorted(scripts) == sorted(PYPROJECT["project"]["scripts"])
    (docker_smoke,) = [args for args in FINAL.all("RUN") if "--help" in args]
    assert smoke_loop(docker_smoke) == scripts
    (build_smoke,) = build.lines["smoke"]
    assert smoke_loop(build_smoke) == scripts


def test_python_is_debians_python3_of_bookworm(build: BuildConfig) -> None:
    """Both recipes run Debian's python3 (3.11 on bookworm), installed from Debian's archive."""
    suite, packages = CONTRACT["IMAGE_DEBIAN_SUITE"], CONTRACT["IMAGE_PYTHON_PACKAGES"].split()
    assert suite == "bookworm"
    assert CONTRACT["IMAGE_PYTHON_VERSION"] == DEBIAN_PYTHON[suite]
    assert packages == ["python3", "python3-venv"]
    minimum = PYPROJECT["project"]["requires-python"].removeprefix(">=")
    assert tuple(map(int, DEBIAN_PYTHON[suite].split("."))) >= tuple(map(int, minimum.split(".")))
    # Dockerfile: every stage rests on debian:<suite>-slim, which gets exactly these packages by apt.
    assert {root_image(stage) for stage in STAGES} == {f"debian:{suite}-slim"}
    installs = [run for stage in STAGES for run in stage.all("RUN") if "apt-get install" in run]
    assert len(installs) == 1
    install = re.search(r"apt-get install ((?:-\S+ )*)([\w .+-]+?)(?: &&|$)", installs[0])
    assert install is not None
    assert install.group(2).split() == packages
    assert "--no-install-recommends" in install.group(1)
    # build.sh: a minbase debootstrap of the same suite that includes the same packages.
    assert build.lines["debootstrap"] == ["--variant=minbase", f"--include={','.join(packages)}", suite]
    assert build.lines["python"] == [DEBIAN_PYTHON[suite]]


def test_venv_is_built_the_same_way(build: BuildConfig) -> None:
    """Same venv path, made by Debian's python3, same pip pin, wheel and install steps in both."""
    venv = CONTRACT["IMAGE_VENV"]
    assert venv == "/opt/imexdra"
    (build_stage,) = [stage for stage in STAGES if stage.name == "build"]
    assert build_stage.all("WORKDIR") == ["/src"]
    (docker_run,) = build_stage.all("RUN")
    # `.` is the WORKDIR /src in the Dockerfile; build.sh copies the same context to /src.
    docker_steps = [re.sub(r" \.$", " /src", step.strip()) for step in docker_run.split("&&")]
    assert docker_steps == build.lines["venv-step"]
    assert docker_steps[0] == f"python3 -m venv {venv}"
    assert f"pip=={CONTRACT['IMAGE_PIP_VERSION']}" in docker_steps[1]
    # Every dependency from a wheel: no package's build code runs (docs/image.md, "The wheels").
    assert "--only-binary=:all:" in docker_steps[3].split()
    assert FINAL.all("COPY") == [f"--from=build {venv} {venv}"]


def test_environment_is_the_same(build: BuildConfig) -> None:
    """Same ENV keys and values; the venv's bin is first on PATH, before Debian's default PATH."""
    venv, expected = CONTRACT["IMAGE_VENV"], contract_env()
    assert dockerfile_env(FINAL) == {"PATH": f"{venv}/bin:$PATH", **expected}
    build_env = dict(pair.split("=", 1) for pair in build.oci["--env"])
    assert build_env == {"PATH": f"{venv}/bin:{CONTRACT['IMAGE_BASE_PATH']}", **expected}
    assert expected == {
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "NVIDIA_DISABLE_REQUIRE": "true",
        "NVIDIA_VISIBLE_DEVICES": "all",
        "NVIDIA_DRIVER_CAPABILITIES": "utility",
    }


def test_user_and_cmd_are_the_same(build: BuildConfig) -> None:
    """Both images run as root by default and their CMD is ``compute-domain-controller --help``."""
    assert FINAL.all("USER") == [CONTRACT["IMAGE_USER"]] == [build.one("--user")] == ["root"]
    cmd = json.loads(CONTRACT["IMAGE_CMD"])
    assert cmd == ["compute-domain-controller", "--help"]
    assert [json.loads(args) for args in FINAL.all("CMD")] == [cmd]
    assert json.loads(build.one("--cmd")) == cmd
    assert "--entrypoint" not in build.oci
    assert FINAL.all("ENTRYPOINT") == []


def test_labels_are_the_same(build: BuildConfig) -> None:
    """Same OCI labels; title, description and licenses as contracted, version the package's."""
    docker_labels = dict(
        word.split("=", 1) for args in FINAL.all("LABEL") for word in shlex.split(args, posix=True)
    )
    build_labels = dict(pair.split("=", 1) for pair in build.oci["--label"])
    keys = {LABEL + key for key in ("title", "description", "version", "revision", "licenses")}
    assert set(docker_labels) == set(build_labels) == keys
    for key, contract_key in [
        ("title", "IMAGE_TITLE"),
        ("description", "IMAGE_DESCRIPTION"),
        ("licenses", "IMAGE_LICENSES"),
    ]:
        assert docker_labels[LABEL + key] == build_labels[LABEL + key] == CONTRACT[contract_key]
    version = PYPROJECT["project"]["version"]
    assert CONTRACT["IMAGE_LICENSES"] == PYPROJECT["project"]["license"]
    assert [a for a in FINAL.all("ARG") if a.startswith("VERSION=")] == [f"VERSION={version}"]
    assert build_labels[LABEL + "version"] == version


def test_reference_is_the_charts_default_image(build: BuildConfig) -> None:
    """build.sh tags the image with what the chart's pods ask for by default, fully qualified."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == PYPROJECT["project"]["version"]
    repository, tag = values["image"]["repository"], values["image"]["tag"] or chart["appVersion"]
    # As the kubelet and containerd's CRI normalize a short name (docker.io, library/).
    name = repository if "/" in repository else f"library/{repository}"
    first = name.split("/", 1)[0]
    if "." not in first and ":" not in first and first != "localhost":
        name = f"docker.io/{name}"
    assert build.one("--ref") == f"{name}:{tag}"


def test_the_tests_run_on_the_images_python() -> None:
    """This interpreter is the image's Python minor version (tools/venv.sh picks it), and mypy checks for it.

    What passes here then runs in the image: no syntax, stdlib or wheel of another version.
    """
    assert f"{sys.version_info.major}.{sys.version_info.minor}" == CONTRACT["IMAGE_PYTHON_VERSION"]
    assert PYPROJECT["tool"]["mypy"]["python_version"] == CONTRACT["IMAGE_PYTHON_VERSION"]


def test_platforms_are_the_contracts_and_the_dockerfile_names_none(build: BuildConfig) -> None:
    """build.sh builds the contract's platforms; the Dockerfile (buildx builds it for each) names none."""
    assert CONTRACT["IMAGE_PLATFORMS"].split() == build.lines["platform"] == ["linux/amd64", "linux/arm64"]
    assert [stage.base for stage in STAGES if "--platform" in stage.base] == []
    for keyword, args in instructions():
        assert not ARCH_WORDS.search(args), f"{keyword} {args}"


def test_arm64_venv_is_the_last_step_for_a_grace_tray(build: BuildConfig) -> None:
    """build.sh's arm64 venv step is the Dockerfile's install step, for aarch64 wheels of the image's glibc.

    The tags are those pip computes on an arm64 machine with the suite's glibc: manylinux_2_17 up to
    it, and manylinux2014 (protobuf's aarch64 wheel carries that name alone).
    """
    suite, python = CONTRACT["IMAGE_DEBIAN_SUITE"], CONTRACT["IMAGE_PYTHON_VERSION"]
    assert CONTRACT["IMAGE_GLIBC_VERSION"] == DEBIAN_GLIBC[suite]
    (step,) = build.lines["arm64-venv-step"]
    words = shlex.split(step)
    cross: dict[str, list[str]] = {}
    plain = []
    index = 0
    while index < len(words):
        if words[index] in ("--implementation", "--python-version", "--abi", "--platform", "--target"):
            cross.setdefault(words[index], []).append(words[index + 1])
            index += 2
        else:
            plain.append(words[index])
            index += 1
    assert plain == shlex.split(build.lines["venv-step"][3])
    assert cross.pop("--implementation") == ["cp"]
    assert cross.pop("--python-version") == [python]
    assert cross.pop("--abi") == [f"cp{python.replace('.', '')}"]
    site_packages = f"{CONTRACT['IMAGE_VENV']}/lib/python{python}/site-packages"
    assert cross.pop("--target") == [f"/mnt/arm64{site_packages}"]
    newest = int(DEBIAN_GLIBC[suite].split(".")[1])
    expected = {f"manylinux_2_{minor}_aarch64" for minor in range(17, newest + 1)} | {"manylinux2014_aarch64"}
    assert set(cross.pop("--platform")) == expected
    assert cross == {}
