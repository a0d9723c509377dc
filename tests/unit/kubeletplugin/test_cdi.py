"""CDI spec building: edits, device IDs, normalisation, root transform, cdiVersion, validation."""

from pathlib import Path

import pytest

from imexdra.devices.procfs import CharDevice
from imexdra.kubeletplugin.cdi.spec import (
    CdiDevice,
    CdiSpecError,
    ContainerEdits,
    DeviceNode,
    DriverRoots,
    Hook,
    Mount,
    Spec,
    base_device_id,
    base_spec,
    channel_edits,
    claim_device_id,
    claim_spec,
    daemon_edits,
    minimum_version,
    normalize,
    transform_roots,
    validate,
)

UID = "0b9e7c1a-1111-2222-3333-444455556666"
SAME_ROOTS = DriverRoots(container="/", host="/")


def channel(n: int, major: int = 234) -> CharDevice:
    return CharDevice(f"/dev/nvidia-caps-imex-channels/channel{n}", major, n, 0o666)


def test_device_ids() -> None:
    """CDI IDs are base device=all and claim=<uid>-<device>, as upstream hands them to the kubelet."""
    assert base_device_id() == "k8s.compute-domain.nvidia.com/device=all"
    assert claim_device_id(UID, "channel-0") == f"k8s.compute-domain.nvidia.com/claim={UID}-channel-0"
    assert claim_device_id(UID, "daemon-0") == f"k8s.compute-domain.nvidia.com/claim={UID}-daemon-0"


def test_claim_spec_channel() -> None:
    """A channel claim spec: kind claim, one device, a char node with hostPath, cdiVersion 0.5.0."""
    spec = claim_spec(UID, [("channel-0", channel_edits([channel(0)]))], roots=DriverRoots())
    assert (spec.kind, spec.cdi_version) == ("k8s.compute-domain.nvidia.com/claim", "0.5.0")
    (device,) = spec.devices
    assert device.name == f"{UID}-channel-0"
    assert device.container_edits == ContainerEdits(
        device_nodes=(
            DeviceNode(
                path="/dev/nvidia-caps-imex-channels/channel0",
                host_path="/dev/nvidia-caps-imex-channels/channel0",
                type="c",
                major=234,
                file_mode=0o666,
            ),
        )
    )
    assert spec.container_edits.is_empty()


@pytest.mark.parametrize(
    ("clique", "fabric", "nodes"),
    [("abc.1", CharDevice("/dev/nvidia-caps/nvidia-cap512", 236, 512, 438), 1), ("", None, 0)],
    ids=["with-clique", "no-clique-still-sets-empty-env"],
)
def test_daemon_edits(clique: str, fabric: CharDevice | None, nodes: int) -> None:
    """Daemon edits: four env vars in order, the /imexd bind mount, the capability node only with a clique."""
    edits = daemon_edits(
        clique_id=clique,
        domain_uid="cd",
        domain_name="n",
        domain_namespace="ns",
        domain_dir=Path("/d/cd"),
        fabric_mgmt=fabric,
    )
    assert edits.env == (
        f"CLIQUE_ID={clique}",
        "COMPUTE_DOMAIN_UUID=cd",
        "COMPUTE_DOMAIN_NAME=n",
        "COMPUTE_DOMAIN_NAMESPACE=ns",
    )
    assert edits.mounts == (Mount("/d/cd", "/imexd", ("rw", "nosuid", "nodev", "bind")),)
    assert len(edits.device_nodes) == nodes


def test_all_mode_channels_in_string_order() -> None:
    """With allocationMode All, device nodes sort by path string: channel0, 1, 10, 100, 1000, 1001, ..."""
    spec = claim_spec(
        UID, [("channel-0", channel_edits(channel(n) for n in range(2048)))], roots=DriverRoots()
    )
    paths = [n.path.rsplit("/", 1)[1] for n in spec.devices[0].container_edits.device_nodes]
    assert paths[:6] == ["channel0", "channel1", "channel10", "channel100", "channel1000", "channel1001"]
    assert paths.index("channel205") == paths.index("channel2047") + 1
    assert len(paths) == 2048


def test_normalize_dedupes_sorts_and_hoists() -> None:
    """Duplicates go; devices sort by name, nodes by depth then path; spec-level repeats leave devices."""
    shared = DeviceNode("/dev/nvidiactl")
    spec = Spec(
        kind="k8s.compute-domain.nvidia.com/device",
        devices=(
            CdiDevice(
                "b",
                ContainerEdits(
                    device_nodes=(
                        DeviceNode("/dev/a/b/c"),
                        DeviceNode("/dev/z"),
                        shared,
                        DeviceNode("/dev/z"),
                    )
                ),
            ),
            CdiDevice("a", ContainerEdits(env=("X=1", "X=1"), device_nodes=(shared,))),
        ),
        container_edits=ContainerEdits(device_nodes=(shared,)),
    )
    out = normalize(spec)
    assert [d.name for d in out.devices] == ["a", "b"]
    assert out.devices[0].container_edits == ContainerEdits(env=("X=1",))
    assert [n.path for n in out.devices[1].container_edits.device_nodes] == ["/dev/z", "/dev/a/b/c"]


def test_normalize_keeps_edits_that_would_empty_a_device() -> None:
    """A device whose edits all repeat spec-level edits keeps them rather than becoming empty."""
    shared = DeviceNode("/dev/nvidiactl")
    spec = Spec(
        kind="v.x/c",
        devices=(CdiDevice("a", ContainerEdits(device_nodes=(shared,))),),
        container_edits=ContainerEdits(device_nodes=(shared,)),
    )
    assert normalize(spec).devices[0].container_edits.device_nodes == (shared,)


def test_root_transform() -> None:
    """Node hostPaths default to path; container-root prefixes become host-root paths; equal roots: no-op."""
    spec = Spec(
        kind="v.x/c",
        devices=(
            CdiDevice(
                "d",
                ContainerEdits(
                    device_nodes=(
                        DeviceNode("/dev/nvidia0", host_path="/driver-root/dev/nvidia0"),
                        DeviceNode("/dev/x"),
                    ),
                    mounts=(
                        Mount("/driver-root/usr/lib/libcuda.so", "/usr/lib/libcuda.so"),
                        Mount("/var/lib/x", "/x"),
                    ),
                ),
            ),
        ),
    )
    edits = transform_roots(spec, DriverRoots(container="/driver-root", host="/")).devices[0].container_edits
    assert [n.host_path for n in edits.device_nodes] == ["/dev/nvidia0", "/dev/x"]
    assert [m.host_path for m in edits.mounts] == ["/usr/lib/libcuda.so", "/var/lib/x"]
    assert transform_roots(spec, SAME_ROOTS) == spec


@pytest.mark.parametrize(
    ("spec", "version"),
    [
        (Spec("v.x/claim", (CdiDevice("u-channel-0", ContainerEdits(env=("A=1",))),)), "0.3.0"),
        (
            Spec("v.x/claim", (CdiDevice("a", ContainerEdits(mounts=(Mount("/h", "/c", type="bind"),))),)),
            "0.4.0",
        ),
        (Spec("v.x/claim", (CdiDevice("0b9e-channel-0", ContainerEdits(env=("A=1",))),)), "0.5.0"),
        (
            Spec(
                "v.x/claim",
                (CdiDevice("a", ContainerEdits(device_nodes=(DeviceNode("/d", host_path="/d"),))),),
            ),
            "0.5.0",
        ),
        (Spec("v.x/cl.aim", (CdiDevice("a", ContainerEdits(env=("A=1",))),)), "0.6.0"),
    ],
    ids=["plain", "mount-type", "name-starts-with-digit", "host-path", "dotted-class"],
)
def test_minimum_version(spec: Spec, version: str) -> None:
    """cdiVersion is the lowest version whose features the spec uses (docs/compatibility.md §2.6)."""
    assert minimum_version(spec) == version


def test_same_roots_letter_uid_is_030() -> None:
    """With equal roots and a UID starting with a letter, a claim spec needs only 0.3.0."""
    assert (
        claim_spec("a1b2", [("channel-0", channel_edits([channel(0)]))], roots=SAME_ROOTS).cdi_version
        == "0.3.0"
    )


def _one(edits: ContainerEdits, name: str = "dev") -> Spec:
    return Spec("k8s.compute-domain.nvidia.com/claim", (CdiDevice(name, edits),))


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (Spec("k8s.compute-domain.nvidia.com/claim", ()), "no devices"),
        (Spec("1bad/claim", (CdiDevice("a", ContainerEdits(env=("A=1",))),)), "invalid CDI kind"),
        (
            Spec(
                "v.x/claim",
                (CdiDevice("a", ContainerEdits(env=("A=1",))), CdiDevice("a", ContainerEdits(env=("B=1",)))),
            ),
            "duplicate devices",
        ),
        (_one(ContainerEdits(env=("A=1",)), name="-bad"), "invalid CDI device name"),
        (_one(ContainerEdits()), "no container edits"),
        (_one(ContainerEdits(env=("=x",))), "invalid environment variable"),
        (_one(ContainerEdits(env=("NOEQUALS",))), "invalid environment variable"),
        (_one(ContainerEdits(device_nodes=(DeviceNode(""),))), "without a path"),
        (_one(ContainerEdits(device_nodes=(DeviceNode("/d", type="x"),))), "invalid type"),
        (_one(ContainerEdits(device_nodes=(DeviceNode("/d", permissions="rwx"),))), "invalid permissions"),
        (_one(ContainerEdits(hooks=(Hook("preStart", "/h"),))), "invalid hook"),
        (_one(ContainerEdits(hooks=(Hook("prestart", "/h", env=("bad",)),))), "invalid environment variable"),
        (_one(ContainerEdits(mounts=(Mount("", "/c"),))), "empty path"),
    ],
    ids=[
        "no-devices",
        "bad-kind",
        "duplicate-names",
        "bad-device-name",
        "empty-edits",
        "env-empty-name",
        "env-no-equals",
        "node-no-path",
        "node-bad-type",
        "node-bad-permissions",
        "bad-hook-name",
        "bad-hook-env",
        "mount-empty-path",
    ],
)
def test_validation_rules(spec: Spec, message: str) -> None:
    """Specs the CDI library would refuse are a retryable CdiSpecError naming the rule."""
    with pytest.raises(CdiSpecError, match=message):
        validate(spec)


def test_claim_spec_rejects_bad_uid() -> None:
    """A claim UID that cannot form a CDI device name fails at build time."""
    with pytest.raises(CdiSpecError, match="invalid CDI device name"):
        claim_spec("bad uid", [("channel-0", channel_edits([channel(0)]))], roots=DriverRoots())


def test_base_spec() -> None:
    """The base spec: device all with every node, hostPaths on the host root, NVIDIA_VISIBLE_DEVICES=void."""
    nodes = [
        ("/dev/nvidiactl", Path("/driver-root/dev/nvidiactl")),
        ("/dev/nvidia0", Path("/driver-root/dev/nvidia0")),
    ]
    hook = Hook(
        "createContainer",
        "/var/lib/kubelet/plugins/compute-domain.nvidia.com/nvidia-cdi-hook",
        ("nvidia-cdi-hook", "x"),
    )
    spec = base_spec(
        nodes,
        roots=DriverRoots(),
        spec_edits=ContainerEdits(env=("NVIDIA_CTK_LIBCUDA_DIR=/usr/lib64",), hooks=(hook,)),
    )
    assert (spec.kind, spec.cdi_version) == ("k8s.compute-domain.nvidia.com/device", "0.5.0")
    (device,) = spec.devices
    assert device.name == "all"
    assert [(n.path, n.host_path) for n in device.container_edits.device_nodes] == [
        ("/dev/nvidia0", "/dev/nvidia0"),
        ("/dev/nvidiactl", "/dev/nvidiactl"),
    ]
    assert spec.container_edits.env == ("NVIDIA_CTK_LIBCUDA_DIR=/usr/lib64", "NVIDIA_VISIBLE_DEVICES=void")
    assert spec.container_edits.hooks == (hook,)
