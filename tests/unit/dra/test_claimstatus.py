"""ResourceClaimStatus canonicalisation: Go field order, omitempty, zero values, unknown fields."""

import json

import pytest

from imexdra.dra.claimstatus import canonical_claim_status

# The illustrative claim's status in Go order, as the Go plugin would write it.
GO_STATUS = (
    '{"allocation":{"devices":{"results":[{"request":"channel","driver":"compute-domain.nvidia.com",'
    '"pool":"node-a","device":"channel-0"}],"config":[{"source":"FromClaim","requests":["channel"],'
    '"opaque":{"driver":"compute-domain.nvidia.com","parameters":{"allocationMode":"Single",'
    '"apiVersion":"resource.nvidia.com/v1beta1","domainID":"5f0c2c7e-aaaa-bbbb-cccc-0123456789ab",'
    '"kind":"ComputeDomainChannelConfig"}}}]},"nodeSelector":{"nodeSelectorTerms":[{"matchFields":'
    '[{"key":"metadata.name","operator":"In","values":["node-a"]}]}]},'
    '"allocationTimestamp":"2026-01-02T03:04:05Z"},"reservedFor":[{"resource":"pods","name":"worker-0",'
    '"uid":"9d7e0f5a-1111-4222-8333-444455556666"}]}'
)


def _sorted_deep(value: object) -> object:
    if isinstance(value, dict):
        return {key: _sorted_deep(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_sorted_deep(item) for item in value]
    return value


def test_alphabetical_input_gets_go_order() -> None:
    """A status with alphabetically ordered keys (typed-client output) comes back in Go struct order."""
    shuffled = _sorted_deep(json.loads(GO_STATUS))
    assert isinstance(shuffled, dict)
    canonical = canonical_claim_status(shuffled)
    assert json.dumps(canonical, separators=(",", ":")) == GO_STATUS


def test_parameters_keep_their_order() -> None:
    """Opaque parameters are a RawExtension: their key order is kept as given, not reordered."""
    status = {
        "allocation": {
            "devices": {
                "config": [{"source": "FromClaim", "opaque": {"parameters": {"z": 1, "a": 2}, "driver": "d"}}]
            }
        }
    }
    opaque = canonical_claim_status(status)["allocation"]["devices"]["config"][0]["opaque"]
    assert list(opaque) == ["driver", "parameters"]
    assert list(opaque["parameters"]) == ["z", "a"]


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (None, {}),
        ({}, {}),
        ({"allocation": {}}, {"allocation": {"devices": {}}}),
        ({"allocation": {"devices": None, "nodeSelector": None}}, {"allocation": {"devices": {}}}),
        ({"reservedFor": []}, {}),
        ({"unknownField": 1, "allocation": {"bogus": True}}, {"allocation": {"devices": {}}}),
        (
            {
                "allocation": {
                    "devices": {"results": [{"device": "channel-0", "adminAccess": False, "shareID": None}]}
                }
            },
            {
                "allocation": {
                    "devices": {
                        "results": [
                            {
                                "request": "",
                                "driver": "",
                                "pool": "",
                                "device": "channel-0",
                                "adminAccess": False,
                            }
                        ]
                    }
                }
            },
        ),
        (
            {"devices": [{"driver": "d", "pool": "p", "device": "x"}]},
            {"devices": [{"driver": "d", "pool": "p", "device": "x", "conditions": None}]},
        ),
        (
            {"allocation": {"devices": {"results": [{"consumedCapacity": {"b": "1", "a": "2"}}]}}},
            {
                "allocation": {
                    "devices": {
                        "results": [
                            {
                                "request": "",
                                "driver": "",
                                "pool": "",
                                "device": "",
                                "consumedCapacity": {"a": "2", "b": "1"},
                            }
                        ]
                    }
                }
            },
        ),
    ],
    ids=[
        "none",
        "empty",
        "allocation-devices-always-present",
        "nulls-omitted",
        "empty-list-omitted",
        "unknown-fields-dropped",
        "missing-strings-zero-and-false-pointer-kept",
        "conditions-not-omitempty",
        "map-keys-sorted",
    ],
)
def test_go_semantics(status: dict[str, object] | None, expected: dict[str, object]) -> None:
    """Missing, null, empty and unknown fields come out as Go's decode/encode round trip makes them."""
    assert canonical_claim_status(status) == expected


@pytest.mark.parametrize(
    "status",
    [
        {"allocation": "x"},
        {"reservedFor": {"a": 1}},
        {"allocation": {"devices": {"results": [{"request": 3}]}}},
    ],
    ids=["object-expected", "list-expected", "string-expected"],
)
def test_wrong_types_rejected(status: dict[str, object]) -> None:
    """A field of a JSON type Go could not decode is a ValueError with its path."""
    with pytest.raises(ValueError, match="status"):
        canonical_claim_status(status)
