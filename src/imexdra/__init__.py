"""imexdra: a Kubernetes DRA driver for NVIDIA ComputeDomains (driver ``compute-domain.nvidia.com``)."""

__version__ = "0.1.0"
