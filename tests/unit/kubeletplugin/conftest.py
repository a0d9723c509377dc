"""Fixtures the kubelet plugin's unit tests share."""

from __future__ import annotations

from pathlib import Path

import pytest

from imexdra.kubeletplugin.paths import PluginPaths
from tests.unit.kubeletplugin.support import Node


@pytest.fixture
def paths(short_dir: Path) -> PluginPaths:
    """The plugin's kubelet directories (plugins and registry) in ``short_dir``."""
    (short_dir / "registry").mkdir()
    return PluginPaths(plugins_dir=short_dir / "plugins", registrar_dir=short_dir / "registry")


@pytest.fixture
async def node(tmp_path: Path) -> Node:
    """A driver-managed node, initialized (modules testing another kind of node define their own)."""
    n = Node(tmp_path)
    await n.initialize()
    return n
