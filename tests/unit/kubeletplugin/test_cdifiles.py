"""CDI files: upstream's YAML layout and names, schema-valid content, mode 0600, atomic replace, removal."""

import json
import stat
from pathlib import Path

import pytest
import yaml

from imexdra.devices.procfs import CharDevice
from imexdra.kubeletplugin.cdi.files import (
    base_spec_path,
    claim_spec_path,
    claim_spec_uids,
    ensure_cdi_root,
    remove_claim_spec,
    render,
    spec_tree,
    write_base_spec,
    write_claim_spec,
)
from imexdra.kubeletplugin.cdi.spec import (
    CdiDevice,
    CdiSpecError,
    ContainerEdits,
    DriverRoots,
    Mount,
    Spec,
    base_spec,
    channel_edits,
    claim_spec,
    daemon_edits,
)

from .cdi_schema import CDI_VALIDATOR

UID = "0b9e7c1a-1111-2222-3333-444455556666"
DOMAIN_DIR = Path("/var/lib/kubelet/plugins/compute-domain.nvidia.com/domains/cd-uid")
FABRIC = CharDevice("/dev/nvidia-caps/nvidia-cap512", 236, 512, 438)

# Upstream's layout (docs/compatibility.md §2.6), as the vendored yaml.v3 / specs-go render it.
REFERENCE_CHANNEL_SPEC = """---
cdiVersion: 0.5.0
kind: k8s.compute-domain.nvidia.com/claim
devices:
    - name: 0b9e7c1a-1111-2222-3333-444455556666-channel-0
      containerEdits:
        deviceNodes:
            - path: /dev/nvidia-caps-imex-channels/channel0
              hostPath: /dev/nvidia-caps-imex-channels/channel0
              type: c
              major: 234
              fileMode: 438
"""

REFERENCE_DAEMON_SPEC = """---
cdiVersion: 0.5.0
kind: k8s.compute-domain.nvidia.com/claim
devices:
    - name: 0b9e7c1a-1111-2222-3333-444455556666-daemon-0
      containerEdits:
        env:
            - CLIQUE_ID=7c9a3e1f-0d2b-4c5e-8f6a-1b2c3d4e5f60.32766
            - COMPUTE_DOMAIN_UUID=cd-uid
            - COMPUTE_DOMAIN_NAME=cd
            - COMPUTE_DOMAIN_NAMESPACE=default
        deviceNodes:
            - path: /dev/nvidia-caps/nvidia-cap512
              hostPath: /dev/nvidia-caps/nvidia-cap512
              type: c
              major: 236
              minor: 512
              fileMode: 438
        mounts:
            - hostPath: /var/lib/kubelet/plugins/compute-domain.nvidia.com/domains/cd-uid
              containerPath: /imexd
              options:
                - rw
                - nosuid
                - nodev
                - bind
"""


def load(text: str) -> object:
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def daemon(clique: str, fabric: CharDevice | None) -> ContainerEdits:
    return daemon_edits(
        clique_id=clique,
        domain_uid="cd-uid",
        domain_name="cd",
        domain_namespace="default",
        domain_dir=DOMAIN_DIR,
        fabric_mgmt=fabric,
    )


def test_channel_spec_matches_reference_bytes() -> None:
    """A channel claim spec renders byte-for-byte like upstream's yaml.v3 output."""
    edits = channel_edits([CharDevice("/dev/nvidia-caps-imex-channels/channel0", 234, 0, 0o666)])
    assert render(claim_spec(UID, [("channel-0", edits)], roots=DriverRoots())) == REFERENCE_CHANNEL_SPEC


def test_daemon_spec_matches_reference_layout() -> None:
    """A daemon claim spec renders env, the capability node and the /imexd mount in upstream's layout."""
    spec = claim_spec(
        UID, [("daemon-0", daemon("7c9a3e1f-0d2b-4c5e-8f6a-1b2c3d4e5f60.32766", FABRIC))], roots=DriverRoots()
    )
    assert render(spec) == REFERENCE_DAEMON_SPEC


SPECS = {
    "channel": claim_spec(
        UID,
        [
            (
                "channel-0",
                channel_edits([CharDevice("/dev/nvidia-caps-imex-channels/channel0", 235, 0, 0o666)]),
            )
        ],
        roots=DriverRoots(),
    ),
    "channel-many": claim_spec(
        UID,
        [
            (
                "channel-0",
                channel_edits(
                    CharDevice(f"/dev/nvidia-caps-imex-channels/channel{n}", 235, n, 0o666)
                    for n in range(2048)
                ),
            )
        ],
        roots=DriverRoots(),
    ),
    "daemon-clique": claim_spec(UID, [("daemon-0", daemon("c.1", FABRIC))], roots=DriverRoots()),
    "daemon-no-clique": claim_spec(UID, [("daemon-0", daemon("", None))], roots=DriverRoots()),
    "same-roots": claim_spec(
        "abc",
        [("channel-0", channel_edits([CharDevice("/dev/x", 1, 0, 0o666)]))],
        roots=DriverRoots("/", "/"),
    ),
    "base": base_spec([("/dev/nvidiactl", Path("/driver-root/dev/nvidiactl"))], roots=DriverRoots()),
}


@pytest.mark.parametrize("spec", SPECS.values(), ids=SPECS.keys())
def test_rendered_specs_are_schema_valid(spec: Spec) -> None:
    """Every spec we generate parses back as YAML to a schema-valid CDI spec equal to its tree."""
    text = render(spec)
    assert text.startswith("---\n")
    loaded = load(text)
    CDI_VALIDATOR.validate(loaded)
    assert loaded == spec_tree(spec)


@pytest.mark.parametrize("uid", ["123", "true", "a1"], ids=["digits", "bool-word", "plain"])
def test_uid_prefixed_names_stay_plain(uid: str) -> None:
    """Device names carry a -<device> suffix, so even digit or keyword UIDs render plain and read back."""
    spec = claim_spec(
        uid, [("channel-0", channel_edits([CharDevice("/dev/x", 1, 0, 0o666)]))], roots=DriverRoots()
    )
    text = render(spec)
    assert f"    - name: {uid}-channel-0\n" in text
    assert load(text)["devices"][0]["name"] == f"{uid}-channel-0"


@pytest.mark.parametrize(
    "value",
    ["123", "0.5", "true", "null", "1e3", "a: b", "x:", "~", "", "0x1F", "yes", "2001-12-14"],
    ids=repr,
)
def test_ambiguous_strings_are_quoted(value: str) -> None:
    """Strings YAML would read as numbers, booleans, null, dates or mappings are written quoted."""
    mount = Mount("/h", "/c", options=(value,))
    text = render(
        Spec("k8s.compute-domain.nvidia.com/claim", (CdiDevice("d", ContainerEdits(mounts=(mount,))),))
    )
    assert f"- {json.dumps(value)}\n" in text
    assert load(text)["devices"][0]["containerEdits"]["mounts"][0]["options"] == [value]


def test_file_names() -> None:
    """File names follow the CDI transient-spec rule, with / in the id replaced by _."""
    assert base_spec_path(Path("/r")) == Path("/r/k8s.compute-domain.nvidia.com-device_base.yaml")
    assert claim_spec_path(Path("/r"), UID) == Path(f"/r/k8s.compute-domain.nvidia.com-claim_{UID}.yaml")
    assert claim_spec_path(Path("/r"), "a/b").name == "k8s.compute-domain.nvidia.com-claim_a_b.yaml"


async def test_write_and_remove_claim_spec(tmp_path: Path) -> None:
    """Claim specs are written 0600, replaced atomically, removed idempotently."""
    spec = SPECS["channel"]
    path = await write_claim_spec(tmp_path, UID, spec)
    assert path.read_text() == render(spec)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    await write_claim_spec(tmp_path, UID, SPECS["channel-many"])
    assert [p.name for p in tmp_path.iterdir()] == [path.name]
    assert await remove_claim_spec(tmp_path, UID) is True
    assert await remove_claim_spec(tmp_path, UID) is False
    assert list(tmp_path.iterdir()) == []


async def test_base_spec_overwritten(tmp_path: Path) -> None:
    """The base spec is rewritten on every start."""
    await write_base_spec(
        tmp_path, SPECS["channel"].__class__("k8s.compute-domain.nvidia.com/device", SPECS["base"].devices)
    )
    path = await write_base_spec(tmp_path, SPECS["base"])
    assert path.read_text() == render(SPECS["base"])


async def test_invalid_uid_names_no_file(tmp_path: Path) -> None:
    """A claim UID that cannot name a file raises and writes nothing (specs are validated when built)."""
    with pytest.raises(CdiSpecError):
        await write_claim_spec(tmp_path, "bad\x00uid", SPECS["channel"])
    assert list(tmp_path.iterdir()) == []


def test_ensure_cdi_root(tmp_path: Path) -> None:
    """The CDI root is created 0750 when missing; a file in its place is an error."""
    root = tmp_path / "cdi"
    ensure_cdi_root(root)
    assert root.is_dir() and stat.S_IMODE(root.stat().st_mode) & 0o7 == 0
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(FileExistsError):
        ensure_cdi_root(blocker)


def test_claim_spec_uids(tmp_path: Path) -> None:
    """Only claim spec names count: the base spec, temporary files and other vendors' specs do not."""
    for name in [
        "k8s.compute-domain.nvidia.com-claim_uid-1.yaml",
        "k8s.compute-domain.nvidia.com-claim_uid-2.yaml",
        "k8s.compute-domain.nvidia.com-device_base.yaml",
        ".k8s.compute-domain.nvidia.com-claim_uid-3.yaml.tmp",
        "k8s.compute-domain.nvidia.com-claim_.yaml",
        "nvidia.com-gpu.yaml",
    ]:
        (tmp_path / name).write_text("---\n")
    assert claim_spec_uids(tmp_path) == ["uid-1", "uid-2"]
    assert claim_spec_uids(tmp_path / "missing") == []
