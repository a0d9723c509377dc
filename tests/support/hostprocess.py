"""The host-process image of the integration cluster: fakecri runs such a container's command on the host."""

from __future__ import annotations

HOST_IMAGE = "imexdra.test/host:latest"
"""An image fakecri runs as a real host process (the container's command is run on the host)."""

HOST_SRV = "/srv/imexdra-test"
"""A hostPath prefix the cluster maps into its run directory, so host-process pods write nowhere else."""
