"""Applying and reading cluster objects as cluster admin, through the cluster's own ``kubectl``."""

from __future__ import annotations

import json
from typing import Any

import yaml

from imexdra_sim.localcluster.cluster import LocalCluster


def apply(cluster: LocalCluster, *objects: dict[str, Any]) -> None:
    """``kubectl apply`` the given objects as cluster admin."""
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))


def get_json(cluster: LocalCluster, *args: str) -> Any:
    """``kubectl get ... -o json``, decoded."""
    return json.loads(cluster.kubectl("get", *args, "-o", "json").stdout)


def uid_of(cluster: LocalCluster, kind: str, name: str, namespace: str) -> str:
    """The UID of a namespaced object (``kind`` as kubectl spells it, e.g. ``computedomain``)."""
    return cluster.kubectl("get", kind, name, "-n", namespace, "-o", "jsonpath={.metadata.uid}").stdout


def patch_status(cluster: LocalCluster, kind: str, name: str, namespace: str, patch: dict[str, Any]) -> None:
    """Merge ``patch`` into an object through its ``status`` subresource, as the object's controller would.

    The patch is of the whole object: its fields go under ``{"status": ...}``; anything else is ignored.
    """
    cluster.kubectl(
        "patch", kind, name, "-n", namespace, "--subresource=status", "--type=merge", "-p", json.dumps(patch)
    )
