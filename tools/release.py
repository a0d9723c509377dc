"""Publish a release: push the image index and the Helm chart (an OCI artifact) to a registry.

``make release REGISTRY=<host>[/<path>] [VERSION=<x.y.z>]`` runs this (docs/registry.md):

1. checks that VERSION is the version of the package, the chart and the image: ``imexdra --version``,
   the chart's appVersion and the image tag are one number, from pyproject.toml;
2. pushes the image index ``make image`` built (linux/amd64 + linux/arm64) with crane as
   ``<registry>/imexdra:<version>`` and reads back its digest;
3. packages the chart with ``image.repository`` / ``image.tag`` / ``image.digest`` naming exactly that
   index, so that ``helm install`` needs no image values and every node pulls it by digest;
4. pushes the chart with ``helm push`` to ``oci://<registry>/charts`` (``helm install imexdra
   oci://<registry>/charts/imexdra --version <version>``).

Credentials are crane's and helm's own (``crane auth login``, ``helm registry login``: the Docker
config file). ``--ca-file`` trusts a private CA; ``--plain-http`` is for a loopback registry only.
Standard library only, so it runs with any Python 3.11.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHART_DIR = REPO / "deployments" / "helm" / "imexdra"
IMAGE_NAME = "imexdra"
CHART_PATH = "charts"
"""The chart is pushed to ``oci://<registry>/charts``: helm appends the chart's name."""


class ReleaseError(Exception):
    """A release that cannot be made, with what to do instead."""


@dataclass(frozen=True, slots=True)
class Release:
    """What was published: enough to install it and to record it in the CHANGELOG."""

    version: str
    revision: str
    image: str
    """``<registry>/imexdra:<version>@sha256:...``: the image index, pinned."""
    chart: str
    """``oci://<registry>/charts/imexdra``, installed with ``--version <version>``."""
    chart_digest: str


def package_version(checkout: Path = REPO) -> str:
    """The one version number (``checkout``'s pyproject.toml); the chart's copies must equal it (tested)."""
    version: str = tomllib.loads((checkout / "pyproject.toml").read_text())["project"]["version"]
    return version


def cache_root() -> Path:
    """The build cache, as tools/k8s/build.sh uses it."""
    return Path(os.environ.get("IMEXDRA_CACHE", Path.home() / ".cache" / "imexdra"))


def tool(name: str) -> str:
    """``name`` from the build cache (``make k8s`` builds crane and helm), else from PATH."""
    versions = (REPO / "tools" / "k8s" / "versions.env").read_text()
    match = re.search(r"^KUBE_VERSION=(\S+)$", versions, re.MULTILINE)
    cached = cache_root() / f"k8s-{match.group(1) if match else ''}" / "bin" / name
    found = str(cached) if os.access(cached, os.X_OK) else shutil.which(name)
    if found is None:
        raise ReleaseError(
            f"{name} not found in {cached.parent} or on PATH; run `make k8s` or install {name}"
        )
    return found


def set_image_values(values: str, repository: str, tag: str, digest: str) -> str:
    """``values.yaml`` text with the ``image:`` block's repository, tag and digest set; comments kept."""
    block = re.search(r"^image:\n((?:[ #].*\n|\n)*)", values, re.MULTILINE)
    if block is None:
        raise ReleaseError("the chart's values.yaml has no top-level image: block")
    body = block.group(1)
    for key, value in (("repository", repository), ("tag", json.dumps(tag)), ("digest", json.dumps(digest))):
        body, count = re.subn(rf"^  {key}: .*$", f"  {key}: {value}", body, count=1, flags=re.MULTILINE)
        if count != 1:
            raise ReleaseError(f"the chart's image: block has no {key}: line")
    return values[: block.start(1)] + body + values[block.end(1) :]


def _run(argv: list[str], env: dict[str, str] | None = None) -> tuple[str, str]:
    """Run ``argv``; its stdout and stderr, or a ReleaseError with what it said."""
    result = subprocess.run(argv, capture_output=True, text=True, check=False, env=env)
    if result.returncode != 0:
        raise ReleaseError(f"{' '.join(argv)} failed:\n{result.stderr.strip() or result.stdout.strip()}")
    return result.stdout, result.stderr


def image_revision(archive: Path) -> str:
    """The ``org.opencontainers.image.revision`` the image was built with (``imexdra.revision``)."""
    recorded = archive.with_suffix(".revision")
    return recorded.read_text().strip() if recorded.is_file() else "unknown"


def push_image(archive: Path, reference: str, *, ca_file: Path | None, plain_http: bool) -> str:
    """Push the archive's image index to ``reference`` (``<registry>/imexdra:<version>``); its digest."""
    env = dict(os.environ)
    if ca_file is not None:
        env["SSL_CERT_FILE"] = str(ca_file)  # Go's TLS stack (crane) trusts exactly this CA bundle
    with tempfile.TemporaryDirectory(prefix="imexdra-release-") as scratch:
        with tarfile.open(archive) as tar:
            tar.extractall(scratch, filter="data")
        # One entry in the layout, the image index: crane pushes that index (both platforms).
        pushed, _ = _run(
            [tool("crane"), "push", *(["--insecure"] if plain_http else []), scratch, reference], env
        )
    digest = pushed.strip().rpartition("@")[2]
    if not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise ReleaseError(f"crane push printed no digest: {pushed!r}")
    return digest


def push_chart(
    chart_dir: Path,
    registry: str,
    version: str,
    image: tuple[str, str, str],
    *,
    ca_file: Path | None,
    plain_http: bool,
) -> tuple[str, str]:
    """Package the chart naming ``image`` (repository, tag, digest) and push it; its reference and digest."""
    helm = tool("helm")
    tls = [f"--ca-file={ca_file}"] if ca_file is not None else []
    tls += ["--plain-http"] if plain_http else []
    with tempfile.TemporaryDirectory(prefix="imexdra-chart-") as scratch:
        chart = Path(scratch) / "imexdra"
        shutil.copytree(chart_dir, chart)
        values = chart / "values.yaml"
        values.write_text(set_image_values(values.read_text(), *image))
        _run([helm, "package", str(chart), f"--version={version}", f"--app-version={version}", "-d", scratch])
        package = Path(scratch) / f"imexdra-{version}.tgz"
        out, said = _run(
            [
                helm,
                "push",
                str(package),
                f"oci://{registry}/{CHART_PATH}",
                *tls,
                *(["--plain-http"] * plain_http),
            ]
        )
    match = re.search(r"^Digest: (sha256:[0-9a-f]{64})$", out + said, re.MULTILINE)  # helm says it on stderr
    return f"oci://{registry}/{CHART_PATH}/imexdra", match.group(1) if match else "unknown"


def release(
    registry: str,
    version: str,
    *,
    archive: Path,
    chart_dir: Path = CHART_DIR,
    ca_file: Path | None = None,
    plain_http: bool = False,
    allow_dirty: bool = False,
) -> Release:
    """Publish ``version`` to ``registry``; see the module docstring.

    ``chart_dir``: another checkout's chart, with ``archive`` the image that checkout built (the
    upgrade test publishes an earlier commit so, docs/registry.md §2).
    """
    checkout = chart_dir.resolve().parents[2]  # <checkout>/deployments/helm/imexdra
    if version != (packaged := package_version(checkout)):
        raise ReleaseError(
            f"VERSION {version} is not the package's version {packaged} (pyproject.toml): the "
            "image's `imexdra --version` would disagree with its tag. Bump pyproject.toml and the chart's "
            "version/appVersion (deployments/helm/imexdra/Chart.yaml) in a commit first, then `make image`."
        )
    if not archive.is_file():
        raise ReleaseError(f"no image archive {archive}; run `make image` first")
    revision = image_revision(archive)
    if revision.endswith("-dirty") and not allow_dirty:
        raise ReleaseError(
            f"the image was built from an uncommitted tree ({revision}); commit, `make image`, then release"
        )
    repository = f"{registry}/{IMAGE_NAME}"
    digest = push_image(archive, f"{repository}:{version}", ca_file=ca_file, plain_http=plain_http)
    chart, chart_digest = push_chart(
        chart_dir, registry, version, (repository, version, digest), ca_file=ca_file, plain_http=plain_http
    )
    return Release(version, revision, f"{repository}:{version}@{digest}", chart, chart_digest)


def main() -> None:
    """Command line: ``tools/release.py --registry HOST[/PATH] [--version V] ...``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--registry", required=True, help="host[:port][/path] to push to")
    parser.add_argument("--version", default=package_version(), help="the release (default: the package's)")
    parser.add_argument("--archive", type=Path, default=cache_root() / "images" / "imexdra.tar")
    parser.add_argument("--chart", type=Path, default=CHART_DIR, help="the chart directory to package")
    parser.add_argument("--ca-file", type=Path, help="PEM CA bundle the registry's certificate is signed by")
    parser.add_argument("--plain-http", action="store_true", help="no TLS (a loopback registry only)")
    parser.add_argument("--allow-dirty", action="store_true", help="publish an image of an uncommitted tree")
    parser.add_argument("--record", type=Path, help="write what was published here as JSON")
    args = parser.parse_args()
    try:
        published = release(
            args.registry,
            args.version,
            archive=args.archive,
            chart_dir=args.chart,
            ca_file=args.ca_file,
            plain_http=args.plain_http,
            allow_dirty=args.allow_dirty,
        )
    except ReleaseError as error:
        sys.exit(f"release: {error}")
    if args.record:
        args.record.write_text(json.dumps(asdict(published), indent=2) + "\n")
    print(f"image  {published.image}\nchart  {published.chart} --version {published.version}")
    print(f"install: helm install imexdra {published.chart} --version {published.version} \\")
    print("           --namespace imexdra --create-namespace")


if __name__ == "__main__":
    main()
