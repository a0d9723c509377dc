"""The controller's ResourceClaim projection (docs/channel-isolation.md §4).

Aspects covered: a claim decodes straight into its channel hold (numbers >= 1 of our driver, the
domain of its ComputeDomainChannelConfig); channel 0, daemon devices, other drivers and unallocated
claims hold nothing; odd parameters do not break decoding (or a whole LIST); only identity metadata
is kept. In-use protection (docs/in-use-protection.md §3): any channel of a domain, channel 0 too, is
a use of that domain by the pods ``status.reservedFor`` lists; daemon claims and claims without a
channel config are none; the informer index finds a domain's claims.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from imexdra.common.kube.resource import decode_list, decode_object
from imexdra.controller.channels import ClaimHold
from imexdra.controller.claimholds import ChannelClaim, ClaimUse, channel_number, index_by_used_domain

DRIVER = "compute-domain.nvidia.com"
#: The namespace of every claim here.
NS = "team-a"


def result(device: str, driver: str = DRIVER) -> dict[str, Any]:
    return {"request": "channel", "driver": driver, "pool": "node-a", "device": device}


def config(
    domain: str = "d1", *, driver: str = DRIVER, kind: str = "ComputeDomainChannelConfig"
) -> dict[str, Any]:
    parameters = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": kind, "domainID": domain}
    return {
        "source": "FromClaim",
        "requests": ["channel"],
        "opaque": {"driver": driver, "parameters": parameters},
    }


def claim(
    results: list[dict[str, Any]] | None,
    configs: list[dict[str, Any]] | None = None,
    reserved_for: list[dict[str, Any]] | None = None,
) -> bytes:
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": "c",
            "namespace": NS,
            "uid": "claim-1",
            "resourceVersion": "42",
            "labels": {"app": "x"},
            "annotations": {"a": "b"},
            "managedFields": [{"manager": "kube-scheduler", "fieldsV1": {"f:status": {}}}],
        },
        "spec": {"devices": {"requests": [{"name": "channel"}]}},
    }
    if results is not None:
        obj["status"] = {"allocation": {"devices": {"results": results, "config": configs or []}}}
        if reserved_for is not None:
            obj["status"]["reservedFor"] = reserved_for
    return msgspec.json.encode(obj)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param(
            claim([result("channel-7")], [config()]), ClaimHold("d1", frozenset({7}), NS), id="one-channel"
        ),
        pytest.param(
            claim([result("channel-3"), result("channel-12")], [config()]),
            ClaimHold("d1", frozenset({3, 12}), NS),
            id="several-channels",
        ),
        pytest.param(claim([result("channel-7")]), ClaimHold(None, frozenset({7}), NS), id="no-config"),
        pytest.param(
            claim([result("channel-7")], [config(kind="GpuConfig"), config("d2")]),
            ClaimHold("d2", frozenset({7}), NS),
            id="first-channel-config-wins",
        ),
        pytest.param(
            claim([result("channel-7")], [config(driver="gpu.nvidia.com"), config("d3")]),
            ClaimHold("d3", frozenset({7}), NS),
            id="other-drivers-config-skipped",
        ),
        pytest.param(claim([result("channel-0")], [config()]), None, id="channel-0"),
        pytest.param(claim([result("daemon-0")]), None, id="daemon"),
        pytest.param(claim([result("channel-7", driver="gpu.nvidia.com")]), None, id="other-driver"),
        pytest.param(claim(None), None, id="unallocated"),
    ],
)
def test_claim_decodes_into_its_hold(body: bytes, expected: ClaimHold | None) -> None:
    """Only channels >= 1 of our driver are held, for the domain its channel config names."""
    assert decode_object(body, ChannelClaim).hold == expected


def test_odd_parameters_do_not_fail_a_list() -> None:
    """Parameters that are not an object are skipped; the claim and the LIST still decode."""
    odd = msgspec.json.decode(claim([result("channel-5")], [config()]))
    odd["status"]["allocation"]["devices"]["config"][0]["opaque"]["parameters"] = [1, 2]
    body = b'{"metadata": {"resourceVersion": "9"}, "items": [' + msgspec.json.encode(odd) + b"]}"
    _, rv, (only,) = decode_list(body, ChannelClaim)
    assert rv == "9"
    assert only.hold == ClaimHold(None, frozenset({5}), NS)


def test_only_identity_is_kept() -> None:
    """Labels, annotations, managed fields and the status are dropped after decoding."""
    decoded = decode_object(claim([result("channel-7")], [config()]), ChannelClaim)
    assert decoded.status is None
    assert decoded.metadata is not None
    kept = {k: v for k, v in msgspec.structs.asdict(decoded.metadata).items() if v is not None}
    assert kept == {"name": "c", "namespace": "team-a", "uid": "claim-1", "resourceVersion": "42"}


@pytest.mark.parametrize(
    ("device", "number"),
    [("channel-1", 1), ("channel-2047", 2047), ("channel-0", None), ("channel-07", None), ("daemon-1", None)],
)
def test_channel_number(device: str, number: int | None) -> None:
    """Only canonical channel device names of channels >= 1 have a number."""
    assert channel_number(device) == number


def pod(name: str) -> dict[str, Any]:
    """A ``reservedFor`` entry for a pod, as the scheduler writes it."""
    return {"resource": "pods", "name": name, "uid": f"uid-{name}"}


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param(
            claim([result("channel-0")], [config()], [pod("w-0"), pod("w-1")]),
            ClaimUse("d1", ("team-a/w-0", "team-a/w-1")),
            id="channel-0-reserved",
        ),
        pytest.param(
            claim([result("channel-7")], [config("d2")], [pod("w-0")]),
            ClaimUse("d2", ("team-a/w-0",)),
            id="channel-n-reserved",
        ),
        pytest.param(claim([result("channel-7")], [config()]), ClaimUse("d1", ()), id="not-reserved"),
        pytest.param(
            claim(
                [result("channel-0")], [config()], [{"resource": "jobs", "apiGroup": "batch", "name": "j"}]
            ),
            ClaimUse("d1", ()),
            id="non-pod-consumer",
        ),
        pytest.param(
            claim([result("daemon-0")], [config(kind="ComputeDomainDaemonConfig")], [pod("d")]),
            None,
            id="daemon",
        ),
        pytest.param(claim([result("channel-0")], None, [pod("w")]), None, id="no-channel-config"),
        pytest.param(
            claim([result("channel-0", driver="gpu.nvidia.com")], [config()], [pod("w")]),
            None,
            id="other-driver",
        ),
        pytest.param(claim(None), None, id="unallocated"),
    ],
)
def test_claim_decodes_into_its_use(body: bytes, expected: ClaimUse | None) -> None:
    """A channel of ours plus a channel config is a use of that domain by the reserved pods."""
    decoded = decode_object(body, ChannelClaim)
    assert decoded.use == expected
    assert index_by_used_domain(decoded) == ([expected.domain] if expected else [])
