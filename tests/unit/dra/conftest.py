"""Fixtures the DRA layer's unit tests share."""

from __future__ import annotations

from pathlib import Path

import pytest

from imexdra.dra.paths import SocketPaths
from tests.unit.dra.server_fakes import DRIVER_NAME


@pytest.fixture
def paths(short_dir: Path) -> SocketPaths:
    """The plugin's kubelet directories (plugins and registry) in ``short_dir``."""
    (short_dir / "registry").mkdir()
    return SocketPaths(
        plugins_dir=short_dir / "plugins", registrar_dir=short_dir / "registry", driver_name=DRIVER_NAME
    )
