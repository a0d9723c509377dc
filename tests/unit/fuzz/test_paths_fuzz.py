"""Fuzzing names that become paths: domain UIDs, claim UIDs, with ``../``, ``/``, NUL, 300+ bytes, unicode.

A ComputeDomain UID (from a claim's opaque config, i.e. user input) names ``domains/<uid>``; a claim
UID (from the kubelet) names ``<cdi-root>/...-claim_<uid>.yaml``. For any string, the path is a
direct child of its directory or the call raises a ``DriverError``; through a whole prepare and
unprepare, no file or directory appears outside the plugin's own directories.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from pathlib import Path

from hypothesis import example, given
from hypothesis import strategies as st

from imexdra.common.errors import DriverError
from imexdra.kubeletplugin.cdi.files import claim_spec_path, remove_claim_spec
from imexdra.kubeletplugin.cdi.spec import CdiSpecError
from imexdra.kubeletplugin.configs.apply import DomainInfo
from imexdra.kubeletplugin.paths import PluginPaths
from tests.unit.fuzz.profiles import fuzz
from tests.unit.kubeletplugin.support import NAMESPACE, Node, channel_claim, daemon_claim

#: Stands for "an absolute path into a directory outside the node" (filled in per example).
OUTSIDE = "<outside>"
ROOT = Path("/fuzz-root")
odd_names = st.one_of(
    st.sampled_from(
        [
            *("../escape", "../../../escape", "../../../../outside/x", "..", ".", "", "/", "a/../../b"),
            *("a\x00b", "x" * 300, "é" * 128, "\ud800", "..\\..\\x", "./.", "~root", " ", "\n", OUTSIDE),
        ]
    ),
    st.text(st.sampled_from("./\x00aé-_~\\"), max_size=12),
    st.text(max_size=300),
)


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


#: What can arrive through the API (msgspec) or gRPC (protobuf): valid UTF-8, no lone surrogates.
wire_names = odd_names.filter(_utf8)


@fuzz(ci=200, soak=10_000)
@given(uid=odd_names)
@example(uid="../../../escape")
@example(uid="/etc")
def test_domain_dir_is_a_child_of_the_domains_dir(uid: str) -> None:
    """``domain_dir`` of any string is a direct child of ``domains/``, or ConfigError (was: anywhere)."""
    paths = PluginPaths(plugins_dir=ROOT / "plugins")
    try:
        directory = paths.domain_dir(uid)
    except DriverError:
        return
    assert directory.parent == paths.domains_dir
    assert os.path.normpath(directory).startswith(f"{paths.domains_dir}/")
    assert len(directory.name.encode()) <= 255


@fuzz(ci=200, soak=10_000)
@given(uid=odd_names)
@example(uid="a\x00b")
def test_claim_spec_path_is_a_child_of_the_cdi_root(uid: str) -> None:
    """A claim's spec path is a direct child of the CDI root, or CdiSpecError (was: ValueError at the OS)."""
    try:
        path = claim_spec_path(ROOT / "cdi", uid)
    except CdiSpecError:
        return
    assert path.parent == ROOT / "cdi"
    assert os.path.normpath(path).startswith(f"{ROOT}/cdi/")


@fuzz(ci=40, soak=3_000)
@given(domain=wire_names, uid=wire_names)
@example(domain="../../../escape", uid="claim-1")
@example(domain=OUTSIDE, uid="a\x00b")
def test_prepare_and_unprepare_stay_inside(domain: str, uid: str) -> None:
    """Daemon and channel claims with odd domain and claim UIDs: DriverErrors at most, nothing outside."""

    async def scenario(base: Path) -> None:
        outside = base / "outside"
        outside.mkdir()
        domain_id = domain.replace(OUTSIDE, str(outside / "abs"))
        node = Node(base / "node")
        await node.initialize()
        node.domains.known[domain_id] = DomainInfo(domain_id, "odd", NAMESPACE)
        before = _tree(base / "node")
        claims = [daemon_claim(uid, domain=domain_id), channel_claim(uid + "-c", params=None)]
        for claim in claims:
            with contextlib.suppress(DriverError):
                await node.state.prepare(claim)
        for claim in claims:
            with contextlib.suppress(DriverError):
                await node.state.unprepare(claim.ref)
        assert not any(outside.iterdir())
        assert sorted(p.name for p in base.iterdir()) == ["node", "outside"]
        allowed = (node.cdi_root, node.paths.plugin_data_dir, node.paths.domains_dir)
        for path in _tree(base / "node") - before:
            assert path.parent in allowed or path.parent.parent == node.paths.domains_dir, path
        assert await remove_claim_spec(node.cdi_root, uid) is False

    with tempfile.TemporaryDirectory(prefix="fuzz-paths-") as base:
        asyncio.run(scenario(Path(base)))


def _tree(root: Path) -> set[Path]:
    return {Path(directory) / name for directory, dirs, files in os.walk(root) for name in dirs + files}
