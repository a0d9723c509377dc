"""The modes of what the kubelet plugin writes are upstream's (docs/compatibility.md §2.5-§2.7).

Upstream: plugin data dir and CDI root 0750 (``mkdir -p``), CDI spec files 0600 (temp file never
chmod-ed), checkpoint 0600 (the kubelet checkpoint manager's temp file), per-domain daemon dir 0755
and its ``imexd.cfg.tmpl`` 0644, ``pu.lock`` created 0644. Directory and lock modes pass through the
umask as upstream's do, so these tests run under the usual container umask 022. The corrupt-checkpoint
copy has no upstream counterpart; it gets the checkpoint's 0600.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from imexdra.common.files import flock
from imexdra.devices.procfs import CharDevice
from imexdra.dra.server import KubeletPluginServer
from imexdra.kubeletplugin.cdi import files as cdi_files
from imexdra.kubeletplugin.cdi.spec import DriverRoots, channel_edits, claim_spec
from imexdra.kubeletplugin.checkpoint.store import CheckpointStore
from imexdra.kubeletplugin.paths import PluginPaths
from tests.unit.dra.server_fakes import ApiClaims, ScriptedDriver
from tests.unit.kubeletplugin.checkpoint_samples import BOOT_ID
from tests.unit.kubeletplugin.support import Node, daemon_claim


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture(autouse=True)
def container_umask() -> Iterator[None]:
    previous = os.umask(0o022)
    yield
    os.umask(previous)


async def test_cdi_root_and_claim_specs(tmp_path: Path) -> None:
    """CDI root 0750, claim spec files 0600."""
    cdi_root = tmp_path / "etc" / "cdi"
    cdi_files.ensure_cdi_root(cdi_root)
    edits = channel_edits([CharDevice("/dev/nvidia-caps-imex-channels/channel0", 235, 0, 0o666)])
    spec = claim_spec("claim-1", [("channel-0", edits)], roots=DriverRoots())
    written = await cdi_files.write_claim_spec(cdi_root, "claim-1", spec)
    assert (mode(cdi_root), mode(written)) == (0o750, 0o600)


async def test_checkpoint_and_corrupt_copy(tmp_path: Path) -> None:
    """checkpoint.json 0600, also after rewrites; a kept-aside corrupt copy 0600 too."""
    store = CheckpointStore(tmp_path)
    await store.initialize(BOOT_ID)
    assert mode(store.path) == 0o600
    store.path.write_bytes(b'{"checksum":1}')
    with pytest.raises(Exception, match="copy kept at"):
        await store.read()
    [kept] = tmp_path.glob("checkpoint.json.corrupt-*")
    assert mode(kept) == 0o600


async def test_daemon_dir_template_and_lock(tmp_path: Path) -> None:
    """domains/<uid> 0755 with imexd.cfg.tmpl 0644; pu.lock created 0644."""
    node = Node(tmp_path / "node")
    await node.initialize()
    template = node.root / "no-template"  # the template path support.Node gives its DeviceState
    template.write_text("# template\n")
    template.chmod(0o600)
    claim = daemon_claim()
    async with flock.hold(node.paths.prepare_lock):
        await node.state.prepare(claim)
    domain_dir = node.paths.domain_dir("5f0c2c7e-aaaa-bbbb-cccc-0123456789ab")
    assert mode(domain_dir) == 0o755
    assert mode(domain_dir / "imexd.cfg.tmpl") == 0o644
    assert mode(node.paths.prepare_lock) == 0o644


async def test_plugin_data_dir(tmp_path: Path) -> None:
    """The plugin data dir the server creates is 0750."""
    with tempfile.TemporaryDirectory(prefix="kp", dir="/tmp") as short:  # unix socket paths are short
        (Path(short) / "registry").mkdir()
        paths = PluginPaths(plugins_dir=Path(short, "plugins"), registrar_dir=Path(short, "registry"))
        async with KubeletPluginServer(driver=ScriptedDriver(), get_claim=ApiClaims(), paths=paths):
            assert mode(paths.plugin_data_dir) == 0o750
