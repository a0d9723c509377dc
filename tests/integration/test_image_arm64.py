"""The arm64 image, run: under qemu user-mode emulation, without touching the machine's binfmt settings.

GB200 trays are Grace (arm64) machines; the image index tools/image/build.sh writes holds a linux/arm64
image whose root was assembled without running any of it (docs/image.md). Here it runs: its layer is
unpacked as a runtime would unpack it, Debian's static ``qemu-aarch64`` (from qemu-user-static, which
build.sh unpacks beside the archives) is copied in, and ``chroot <root> /usr/bin/qemu-aarch64-static
<program>`` runs one arm64 process in the image's own environment. The kernel only ever executes the
x86-64 emulator, so binfmt_misc is neither needed nor changed; a process the image started itself would
fail with "Exec format error", which is why each check is one Python process.

Checked: every module of the package imports on aarch64 with the aarch64 builds of the compiled
dependencies (msgspec, multidict, protobuf's upb, PyYAML's libyaml, fnv-hash-fast), the bytecode is the
hash-checked bytecode build.sh compiled for the image's paths, each console script answers --help and
--version, and the arm64 image's configuration (environment, user, command, labels) is the amd64 one's.
"""

from __future__ import annotations

import json
import marshal
import os
import shutil
import subprocess
import tarfile
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from imexdra_sim.localcluster.binaries import cache_root
from tests.support.paths import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
SCRIPTS = sorted(PYPROJECT["project"]["scripts"])
FLAGS = ("--help", "--version")
IMAGES = cache_root() / "images"
ARCHIVE = IMAGES / "imexdra.tar"
QEMU = IMAGES / "qemu-aarch64-static"
QEMU_IN_ROOT = "/usr/bin/qemu-aarch64-static"
INDEX = "application/vnd.oci.image.index.v1+json"
#: Imports every module of the package, then reports what it ran on and which builds it loaded.
IMPORT_ALL = """
import importlib, json, pkgutil, platform, sys
import imexdra
names = sorted(m.name for m in pkgutil.walk_packages(imexdra.__path__, "imexdra."))
for name in names:
    importlib.import_module(name)
import fnv_hash_fast._fnv_impl, msgspec._core, multidict._multidict, yaml
from google.protobuf.internal import api_implementation
extensions = (fnv_hash_fast._fnv_impl, msgspec._core, multidict._multidict, yaml._yaml)
print(json.dumps({
    "machine": platform.machine(), "prefix": sys.prefix, "modules": names,
    "extensions": [m.__file__ for m in extensions],
    "protobuf": api_implementation.Type(),
}))
"""


@dataclass(frozen=True)
class Platforms:
    """The image index's per-platform image configs, read from the archive."""

    configs: dict[str, dict[str, Any]]
    layers: dict[str, str]


def member_json(tar: tarfile.TarFile, name: str) -> Any:
    """A JSON member of an archive."""
    member = tar.extractfile(name)
    assert member is not None
    return json.load(member)


def blob_name(digest: str) -> str:
    """Where an OCI layout keeps a blob."""
    return "blobs/" + digest.replace(":", "/", 1)


def read_index(archive: Path) -> Platforms:
    """Each platform's image config and layer blob name, following index.json to the image index."""
    with tarfile.open(archive) as tar:
        [top] = member_json(tar, "index.json")["manifests"]
        entries = (
            member_json(tar, blob_name(top["digest"]))["manifests"] if top["mediaType"] == INDEX else [top]
        )
        configs, layers = {}, {}
        for entry in entries:
            platform = f"{entry['platform']['os']}/{entry['platform']['architecture']}"
            manifest = member_json(tar, blob_name(entry["digest"]))
            configs[platform] = member_json(tar, blob_name(manifest["config"]["digest"]))
            [layer] = manifest["layers"]
            layers[platform] = blob_name(layer["digest"])
    return Platforms(configs, layers)


@pytest.fixture(scope="module")
def platforms() -> Platforms:
    """The archive's platforms; skipped (a failure under CI) when it has no arm64 image."""
    if not ARCHIVE.exists():
        pytest.skip(f"no {ARCHIVE}: run `make image` (or `make k8s`)")
    found = read_index(ARCHIVE)
    if "linux/arm64" not in found.configs:
        pytest.skip(
            f"{ARCHIVE} holds no linux/arm64 image (built with IMEXDRA_IMAGE_PLATFORMS=linux/amd64?); "
            "`make image` builds both"
        )
    return found


@pytest.fixture(scope="module")
def arm64_root(platforms: Platforms, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The arm64 image's layer unpacked (owners and modes kept, as a runtime does), qemu copied in."""
    assert QEMU.exists(), f"{QEMU} missing: tools/image/build.sh unpacks it with the arm64 image"
    root = tmp_path_factory.mktemp("arm64-root")
    with subprocess.Popen(
        ["tar", "-xOf", str(ARCHIVE), platforms.layers["linux/arm64"]], stdout=subprocess.PIPE
    ) as layer:
        subprocess.run(
            ["tar", "-x", "-p", "--numeric-owner", "-C", str(root)],
            stdin=layer.stdout,
            check=True,
            timeout=300,
        )
    assert layer.returncode == 0
    shutil.copy2(QEMU, root / QEMU_IN_ROOT.lstrip("/"))
    return root


def run_arm64(root: Path, env: list[str], argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run one arm64 program of the image under the emulator, chrooted, in the image's environment."""
    chroot = shutil.which("chroot")  # the machine's: the image's PATH is not the machine's
    assert chroot is not None, "chroot (coreutils) not found"
    return subprocess.run(
        [chroot, str(root), QEMU_IN_ROOT, *argv],
        env=dict(pair.split("=", 1) for pair in env),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.fixture(scope="module")
def runs(arm64_root: Path, platforms: Platforms) -> dict[str, subprocess.CompletedProcess[str]]:
    """The import check and every script with every flag, run side by side (emulation is slow)."""
    env = platforms.configs["linux/arm64"]["config"]["Env"]
    commands = {"import-all": ["/opt/imexdra/bin/python", "-c", IMPORT_ALL]}
    for script in SCRIPTS:
        path = f"/opt/imexdra/bin/{script}"
        # What the kernel would do with the script's #! line, done here: run its interpreter on it.
        interpreter = (arm64_root / path.lstrip("/")).read_text().splitlines()[0].removeprefix("#!")
        assert interpreter.startswith("/") and (arm64_root / interpreter.lstrip("/")).exists(), interpreter
        for flag in FLAGS:
            commands[f"{script} {flag}"] = [interpreter, path, flag]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        futures = {key: pool.submit(run_arm64, arm64_root, env, argv) for key, argv in commands.items()}
        return {key: future.result() for key, future in futures.items()}


def package_modules() -> list[str]:
    """Every module of the package, from the sources."""
    src = REPO / "src"
    names = []
    for path in (src / "imexdra").rglob("*.py"):
        parts = path.relative_to(src).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return sorted(n for n in names if n != "imexdra")


def test_every_module_imports_on_aarch64(runs: dict[str, subprocess.CompletedProcess[str]]) -> None:
    """Every module imports in the arm64 image, with the aarch64 builds of the compiled dependencies."""
    result = runs["import-all"]
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["machine"] == "aarch64"
    assert report["prefix"] == "/opt/imexdra"
    assert report["modules"] == package_modules()
    assert all("aarch64-linux-gnu" in path for path in report["extensions"]), report["extensions"]
    # protobuf's aarch64 wheel is tagged manylinux2014 alone; without that tag pip takes its slow
    # pure-Python fallback (docs/image.md, "The wheels").
    assert report["protobuf"] == "upb"


@pytest.mark.parametrize("flag", FLAGS)
@pytest.mark.parametrize("script", SCRIPTS)
def test_console_script_answers(
    runs: dict[str, subprocess.CompletedProcess[str]], script: str, flag: str
) -> None:
    """Each console script of the arm64 image starts under emulation and answers --help and --version."""
    result = runs[f"{script} {flag}"]
    assert result.returncode == 0, result.stderr
    if flag == "--help":
        assert f"Usage: {script}" in result.stdout
    else:
        assert f"version {PYPROJECT['project']['version']}" in result.stdout


def test_bytecode_is_hash_checked_for_the_images_paths(arm64_root: Path) -> None:
    """build.sh compiled the arm64 root's bytecode: hash-checked (PEP 552), naming the image's paths."""
    samples = [
        arm64_root / "opt/imexdra/lib/python3.11/site-packages/imexdra/__pycache__/__init__.cpython-311.pyc",
        arm64_root / "usr/lib/python3.11/__pycache__/os.cpython-311.pyc",
    ]
    for pyc in samples:
        data = pyc.read_bytes()
        assert int.from_bytes(data[4:8], "little") == 0b11, f"{pyc} is not checked-hash bytecode"
        source = pyc.parent.parent / (pyc.name.split(".")[0] + ".py")
        assert marshal.loads(data[16:]).co_filename == "/" + source.relative_to(arm64_root).as_posix()


def test_arm64_image_has_the_amd64_images_configuration(platforms: Platforms) -> None:
    """One contract: the arm64 image's environment, user, command and labels are the amd64 image's."""
    amd64, arm64 = platforms.configs["linux/amd64"], platforms.configs["linux/arm64"]
    assert (amd64["architecture"], arm64["architecture"]) == ("amd64", "arm64")
    assert arm64["config"] == amd64["config"]
