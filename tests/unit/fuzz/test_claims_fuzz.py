"""Fuzzing ResourceClaim statuses through config selection and through a whole prepare/unprepare.

Three input domains:

- statuses shaped as the API server serves a ``ResourceClaimStatus`` (strings where strings go),
  with random requests, drivers, devices, config sources and near-valid opaque parameters: config
  selection either groups every one of our results exactly once under a config of its device type,
  or raises a ``DriverError``;
- arbitrary JSON where the status goes (what a corrupt source could hold): decoding it at the edge
  (``resourceclaim``) and selecting configs raise ``DriverError`` only;
- schema-shaped claims prepared and unprepared by a real ``DeviceState`` over real files: each call
  returns or raises a ``DriverError``, and the checkpoint stays readable.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from imexdra.api.constants import DeviceType
from imexdra.api.opaque import ComputeDomainChannelConfig
from imexdra.common.errors import DriverError
from imexdra.dra.resourceclaim import ClaimRef, ResourceClaimStatus, resource_claim
from imexdra.kubeletplugin.configs.claim import config_groups, non_admin_devices, opaque_device_configs
from imexdra.kubeletplugin.slices import allocatable_devices
from tests.unit.api.opaque_inputs import json_values
from tests.unit.fuzz.profiles import fuzz
from tests.unit.kubeletplugin.support import (
    DOMAIN_UID,
    DRIVER,
    NAMESPACE,
    Node,
    channel_params,
    daemon_params,
)

ALLOCATABLE = allocatable_devices()
REQUESTS = ["channel", "daemon", "channel/sub", "req-0", ""]
DEVICES = ["channel-0", "channel-1", "channel-2047", "channel-2048", "daemon-0", "daemon-1", "gpu-0", ""]
DRIVERS = [DRIVER, "gpu.nvidia.com", ""]

parameters = st.one_of(
    st.builds(
        channel_params,
        domain=st.sampled_from([DOMAIN_UID, "", "other"]),
        mode=st.sampled_from(["Single", "All", None, "x"]),
    ),
    st.builds(daemon_params, domain=st.sampled_from([DOMAIN_UID, "", "../escape"])),
    json_values,
)
result_entries = st.fixed_dictionaries(
    {
        "request": st.sampled_from(REQUESTS),
        "driver": st.sampled_from(DRIVERS),
        "device": st.sampled_from(DEVICES),
    },
    optional={"pool": st.just("node-a"), "adminAccess": st.booleans()},
)
config_entries = st.fixed_dictionaries(
    {"source": st.sampled_from(["FromClaim", "FromClass", "FromElsewhere", ""])},
    optional={
        "requests": st.lists(st.sampled_from(REQUESTS), max_size=3),
        "opaque": st.fixed_dictionaries(
            {"driver": st.sampled_from(DRIVERS)}, optional={"parameters": parameters}
        ),
    },
)
api_statuses: st.SearchStrategy[dict[str, Any]] = st.one_of(
    st.just({}),
    st.fixed_dictionaries(
        {
            "allocation": st.fixed_dictionaries(
                {},
                optional={
                    "devices": st.fixed_dictionaries(
                        {},
                        optional={
                            "results": st.lists(result_entries, max_size=4),
                            "config": st.lists(config_entries, max_size=4),
                        },
                    )
                },
            )
        },
        optional={
            "reservedFor": st.lists(
                st.fixed_dictionaries({"resource": st.just("pods"), "name": st.text(max_size=5)}), max_size=2
            )
        },
    ),
)
SHAPE_KEYS = ["allocation", "devices", "results", "config", "opaque", "parameters", "requests", "source"]
SHAPE_KEYS += ["driver", "device", "request", "adminAccess", DRIVER, "FromClaim", "channel-0", "daemon-0"]
junk_statuses = st.recursive(
    st.none() | st.booleans() | st.integers() | st.sampled_from(SHAPE_KEYS) | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(SHAPE_KEYS), inner, max_size=4)
    ),
    max_leaves=16,
)


REF = ClaimRef(NAMESPACE, "name", "claim-1")


def typed(status: object) -> ResourceClaimStatus:
    """``status`` decoded as it enters the plugin (raises ``MalformedClaimError``, a DriverError)."""
    return resource_claim(REF, status).status


def ours(status: Mapping[str, Any]) -> list[str]:
    """The device names of our driver's results, in order (the oracle's own reading of the status)."""
    results = status.get("allocation", {}).get("devices", {}).get("results", [])
    return [entry["device"] for entry in results if entry["driver"] == DRIVER]


@fuzz(ci=200, soak=15_000)
@given(status=api_statuses, strict=st.booleans())
def test_api_shaped_statuses(status: dict[str, Any], strict: bool) -> None:
    """API-shaped statuses: every result of ours grouped once under a fitting config, or a DriverError."""
    try:
        groups = config_groups(typed(status), ALLOCATABLE, strict=strict)
    except DriverError:
        return
    grouped = [result.device for group in groups for result in group.results]
    assert sorted(grouped) == sorted(ours(status))
    for group in groups:
        wanted = (
            DeviceType.CHANNEL if isinstance(group.config, ComputeDomainChannelConfig) else DeviceType.DAEMON
        )
        assert all(device.type == wanted for device in group.devices)
    assert non_admin_devices(typed(status)) <= set(ours(status))


@fuzz(ci=200, soak=15_000)
@given(status=junk_statuses, strict=st.booleans())
@example(status={"allocation": {"devices": {"results": [1]}}}, strict=True)
@example(status={"allocation": []}, strict=True)
@example(status=["allocation"], strict=False)
@example(
    status={"allocation": {"devices": {"config": [{"source": "FromClaim", "opaque": "x"}]}}}, strict=True
)
@example(
    status={
        "allocation": {
            "devices": {
                "config": [
                    {
                        "source": "FromClaim",
                        "requests": 5,
                        "opaque": {"driver": DRIVER, "parameters": channel_params()},
                    }
                ]
            }
        }
    },
    strict=True,
)
def test_statuses_of_any_shape(status: Any, strict: bool) -> None:
    """Any JSON where the status goes: decoding and config selection return or raise DriverError."""
    for call in (
        lambda: config_groups(typed(status), ALLOCATABLE, strict=strict),
        lambda: opaque_device_configs(typed(status), strict=strict),
        lambda: non_admin_devices(typed(status)),
    ):
        with contextlib.suppress(DriverError):
            call()


claim_uids = st.sampled_from(["claim-1", "claim-2", "a" * 64]) | st.text(
    st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=12
)


@fuzz(ci=25, soak=4_000)
@given(
    statuses=st.lists(st.tuples(claim_uids, api_statuses), min_size=1, max_size=3),
    unprepare_first=st.booleans(),
)
def test_prepare_and_unprepare_through_device_state(
    statuses: list[tuple[str, dict[str, Any]]], unprepare_first: bool
) -> None:
    """A real DeviceState prepares/unprepares API-shaped claims: DriverErrors at most; checkpoint intact."""

    async def scenario(root: Path) -> None:
        node = Node(root)
        await node.initialize()
        refs = [ClaimRef(NAMESPACE, f"name-{index}", uid) for index, (uid, _) in enumerate(statuses)]
        if unprepare_first:
            with contextlib.suppress(DriverError):
                await node.state.unprepare(refs[0])
        for ref, (_, status) in zip(refs, statuses, strict=True):
            with contextlib.suppress(DriverError):
                await node.state.prepare(resource_claim(ref, status))
        for ref in refs:
            with contextlib.suppress(DriverError):
                await node.state.unprepare(ref)
        await node.store.read()

    with tempfile.TemporaryDirectory(prefix="fuzz-claims-") as root:
        asyncio.run(scenario(Path(root)))
