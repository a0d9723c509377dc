"""What stands behind the kubelet-facing servers in their tests: a scripted driver and the API's claims.

The server and health tests and the driver fuzz tests drive the servers with them.
"""

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from imexdra.dra.driver import Device, PrepareResult, UnprepareResult
from imexdra.dra.resourceclaim import ClaimRef, ResourceClaim, parse_claim

#: The driver the servers serve in these tests (the DRA layer takes any name).
DRIVER_NAME = "compute-domain.nvidia.com"
ALLOCATED = {"allocation": {"devices": {"results": [{"request": "channel", "driver": DRIVER_NAME}]}}}


class ScriptedDriver:
    """Answers per UID from a script: a device tuple, an exception, or None (left out)."""

    def __init__(self) -> None:
        self.prepare_script: dict[str, tuple[Device, ...] | Exception | None] = {}
        self.unprepare_script: dict[str, Exception | None] = {}
        self.prepared: list[ResourceClaim] = []
        self.unprepared: list[ClaimRef] = []
        self.raise_on_call: Exception | None = None
        self.gates: dict[str, asyncio.Event] = {}

    async def prepare(self, claims: Sequence[ResourceClaim]) -> Mapping[str, PrepareResult]:
        if self.raise_on_call:
            raise self.raise_on_call
        self.prepared.extend(claims)
        results: dict[str, PrepareResult] = {}
        for claim in claims:
            if claim.ref.uid in self.gates:
                await self.gates[claim.ref.uid].wait()
            outcome = self.prepare_script.get(claim.ref.uid)
            if isinstance(outcome, Exception):
                results[claim.ref.uid] = PrepareResult(error=outcome)
            elif outcome is not None:
                results[claim.ref.uid] = PrepareResult(devices=outcome)
        return results

    async def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, UnprepareResult]:
        if self.raise_on_call:
            raise self.raise_on_call
        self.unprepared.extend(claims)
        return {ref.uid: UnprepareResult(error=self.unprepare_script.get(ref.uid)) for ref in claims}


class ApiClaims:
    """The API server's ResourceClaims as the injected getter sees them."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.calls = 0

    def add(self, namespace: str, name: str, uid: str, status: object = None) -> None:
        self.objects[(namespace, name)] = {
            "metadata": {"namespace": namespace, "name": name, "uid": uid},
            "status": ALLOCATED if status is None else status,
        }

    async def __call__(self, namespace: str, name: str) -> ResourceClaim:
        self.calls += 1
        try:
            obj = self.objects[(namespace, name)]
        except KeyError:
            raise LookupError(f'resourceclaims "{name}" not found') from None
        return parse_claim(obj)
