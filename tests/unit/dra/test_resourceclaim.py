"""Decoding a ResourceClaim where it enters the plugin: typed parts, canonical status, malformed input."""

from typing import Any

import pytest

from imexdra.common.errors import is_permanent
from imexdra.dra.claimstatus import canonical_claim_status
from imexdra.dra.resourceclaim import (
    AllocationResult,
    ClaimRef,
    DeviceAllocationConfiguration,
    DeviceAllocationResult,
    DeviceRequestAllocationResult,
    MalformedClaimError,
    OpaqueDeviceConfiguration,
    ResourceClaimConsumerReference,
    ResourceClaimStatus,
    parse_claim,
    recorded_status,
    resource_claim,
)
from tests.unit.kubeletplugin.support import DRIVER, NAMESPACE, channel_params, config, result, status

REF = ClaimRef(NAMESPACE, "claim-1-name", "claim-1")
API_STATUS = {
    **status([result("channel", "channel-0", admin=False)], [config(channel_params(), requests=["channel"])]),
    "reservedFor": [{"resource": "pods", "name": "pod-a", "uid": "pod-uid", "futureField": 1}],
}


def api_claim(claim_status: object) -> dict[str, Any]:
    """A ResourceClaim object as the API server serves it."""
    meta = {"name": REF.name, "namespace": REF.namespace, "uid": REF.uid, "resourceVersion": "7"}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": meta,
        "status": claim_status,
    }


def test_api_claim_is_decoded_into_types() -> None:
    """The GET's object becomes its ref and a typed status with the API's names and defaults."""
    claim = parse_claim(api_claim(API_STATUS))
    assert claim.ref == REF
    assert claim.status == ResourceClaimStatus(
        allocation=AllocationResult(
            devices=DeviceAllocationResult(
                results=(DeviceRequestAllocationResult("channel", DRIVER, "node-a", "channel-0", False),),
                config=(
                    DeviceAllocationConfiguration(
                        source="FromClaim",
                        requests=("channel",),
                        opaque=OpaqueDeviceConfiguration(DRIVER, channel_params()),
                    ),
                ),
            )
        ),
        reserved_for=(ResourceClaimConsumerReference(resource="pods", name="pod-a", uid="pod-uid"),),
    )


def test_status_json_is_the_canonical_status_the_checkpoint_records() -> None:
    """The whole status travels along in Go's canonical form, and reads back to the same types."""
    claim = parse_claim(api_claim(API_STATUS))
    assert claim.status_json == canonical_claim_status(API_STATUS)
    assert recorded_status(claim.status_json) == claim.status


@pytest.mark.parametrize(
    "claim_status",
    [None, {}, {"reservedFor": []}],
    ids=["no-status", "empty-status", "reserved-for-nothing"],
)
def test_unallocated_claims_have_no_allocation(claim_status: object) -> None:
    """A claim the scheduler has not allocated decodes with ``allocation`` None."""
    assert parse_claim(api_claim(claim_status)).status.allocation is None


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (["not", "an", "object"], "malformed ResourceClaim: expected an object, got list"),
        ({"metadata": "uid", "status": {}}, "malformed ResourceClaim metadata: Expected `object`"),
        (
            {"metadata": {"uid": 7}},
            r"malformed ResourceClaim metadata: Expected `str`, got `int` - at `\$.uid`",
        ),
        (api_claim(["allocation"]), "malformed ResourceClaim status: status: expected an object, got list"),
        (api_claim({"allocation": []}), "status.allocation: expected an object, got list"),
        (
            api_claim({"allocation": {"devices": {"results": [1]}}}),
            r"status.allocation.devices.results\[0\]: expected an object, got int",
        ),
        (
            api_claim(status([result("channel", "channel-0")], [config(channel_params(), requests=[5])])),
            r"Expected `str`, got `int` - at `\$.allocation.devices.config\[0\].requests\[0\]`",
        ),
        (
            api_claim(status([{**result("channel", "channel-0"), "adminAccess": "yes"}])),
            r"Expected `bool \| null`, got `str` - at `\$.allocation.devices.results\[0\].adminAccess`",
        ),
        (
            api_claim({"reservedFor": [{"resource": "pods", "name": ["p"]}]}),
            r"status.reservedFor\[0\].name: expected a string, got list",
        ),
    ],
    ids=[
        "object-is-a-list",
        "metadata-is-text",
        "uid-is-a-number",
        "status-is-a-list",
        "allocation-is-a-list",
        "result-is-a-number",
        "request-name-is-a-number",
        "admin-access-is-text",
        "consumer-name-is-a-list",
    ],
)
def test_malformed_claims_are_permanent_errors(obj: object, message: str) -> None:
    """A claim not shaped as the API type is a permanent MalformedClaimError naming where, never a crash."""
    with pytest.raises(MalformedClaimError, match=message) as caught:
        parse_claim(obj)
    assert is_permanent(caught.value)


def test_malformed_recorded_status_is_a_permanent_error() -> None:
    """A checkpointed status whose fields have the wrong types is refused the same way."""
    with pytest.raises(MalformedClaimError, match="malformed ResourceClaim status") as caught:
        recorded_status({"allocation": {"devices": {"results": [{"request": 1}]}}})
    assert is_permanent(caught.value)


def test_resource_claim_keeps_the_given_ref() -> None:
    """Building a claim from a ref and a status (checkpoint and test edge) keeps the ref as given."""
    claim = resource_claim(REF, API_STATUS)
    assert claim.ref == REF
    assert claim.status == parse_claim(api_claim(API_STATUS)).status
