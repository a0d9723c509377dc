"""Where the binaries built by tools/k8s/build.sh live, and checking that they are there.

Besides the cluster binaries that is the mock ``libnvidia-ml.so.1`` (sim/nvml-mock, docs/nvml-mock.md)
and Debian's ``prometheus`` and ``promtool`` (tools/k8s/prometheus.sh, docs/monitoring.md §4).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from imexdra.common.errors import ConfigError

KUBE_VERSION = "1.36.4"
"""The default Kubernetes version; must match tools/k8s/versions.env, a unit test keeps the two in step."""

KUBE_COMPAT_VERSIONS = ("1.34.12", "1.35.8")
"""The other minors the chart admits, as tools/k8s/versions.env lists them (the same unit test)."""

KUBE_VERSION_ENV = "IMEXDRA_KUBE_VERSION"
"""Selects another version's binaries, built by tools/k8s/build-kube.sh (docs/kubernetes-versions.md)."""

REQUIRED = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubelet",
    "kubectl",
    "kube-proxy",
    "fakecri",
    "imex-probe",  # the fake fabric's GPU program (docs/fake-fabric.md)
    "mpi-operator",
    # containerd nodes (docs/node-runtime.md)
    "containerd",
    "containerd-shim-runc-v2",
    "ctr",
    "runc",
    "bridge",
    "host-local",
    "loopback",
    "iptables",
    # the cluster's registry and the release's pusher (docs/registry.md)
    "oci-registry",
    "crane",
)

NVML_MOCK_LIBRARY = "libnvidia-ml.so.1"

PROMETHEUS_DEB_VERSION = "2.42.0+ds-5+deb12u1"
"""Debian's prometheus package: PROMETHEUS_DEB in tools/k8s/versions.env (a unit test keeps them equal)."""


@dataclass(frozen=True, slots=True)
class Binaries:
    """Absolute paths of the cluster binaries."""

    bin_dir: Path

    def path(self, name: str) -> Path:
        """Return the path of binary ``name``."""
        return self.bin_dir / name

    def search_path(self) -> str:
        """A ``PATH`` with the bin dir first, where containerd finds its shim and kube-proxy iptables.

        As on a real node, where the packages put both in ``/usr/bin``.
        """
        return f"{self.bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"


def cache_root() -> Path:
    """Return the cache root (``IMEXDRA_CACHE`` or ``~/.cache/imexdra``), as the build script uses it."""
    return Path(os.environ.get("IMEXDRA_CACHE", Path.home() / ".cache" / "imexdra"))


def kube_version() -> str:
    """The Kubernetes version the local cluster runs: ``IMEXDRA_KUBE_VERSION``, else the default."""
    return os.environ.get(KUBE_VERSION_ENV) or KUBE_VERSION


def locate(bin_dir: Path | None = None) -> Binaries:
    """Find the built binaries of the selected Kubernetes version, or explain how to build them."""
    version = kube_version()
    directory = bin_dir or cache_root() / f"k8s-{version}" / "bin"
    missing = [name for name in REQUIRED if not os.access(directory / name, os.X_OK)]
    if missing:
        build = (
            "`make k8s`" if version == KUBE_VERSION else f"`make k8s` and `tools/k8s/build-kube.sh {version}`"
        )
        raise ConfigError(f"cluster binaries missing in {directory}: {', '.join(missing)}; run {build} first")
    return Binaries(directory)


def nvml_mock_library() -> Path:
    """Find the mock ``libnvidia-ml.so.1`` built by sim/nvml-mock/build.sh, or explain how to build it.

    Callers copy it next to a profile (docs/nvml-mock.md); it reads the profile beside its own path.
    """
    path = cache_root() / "nvml-mock" / NVML_MOCK_LIBRARY
    if not path.is_file():
        raise ConfigError(f"mock NVML library missing: {path}; run `make k8s` first")
    return path


def prometheus_tool(name: str) -> Path:
    """``prometheus`` or ``promtool`` as tools/k8s/prometheus.sh unpacked it, or explain how to get it."""
    path = cache_root() / f"prometheus-{PROMETHEUS_DEB_VERSION}" / "bin" / name
    if not os.access(path, os.X_OK):
        raise ConfigError(f"{name} missing: {path}; run `make k8s` (or tools/k8s/prometheus.sh) first")
    return path
