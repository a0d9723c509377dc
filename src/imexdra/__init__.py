"""imexdra: a Kubernetes DRA driver for NVIDIA ComputeDomains (driver ``compute-domain.nvidia.com``).

The version has one source, pyproject.toml (docs/registry.md, "One version"): ``imexdra.__version__``
reads the installed package's metadata, when asked, as every ``--version`` does; the chart's
version/appVersion and the image tag are held to it by tests and by tools/release.py.
"""


def __getattr__(name: str) -> str:
    """``__version__``, looked up only when read: a component's start pays nothing for it."""
    if name == "__version__":
        from importlib.metadata import version

        return version("imexdra")
    raise AttributeError(f"module 'imexdra' has no attribute {name!r}")
