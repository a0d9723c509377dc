"""The DRA node service, ``v1.DRAPlugin`` and ``v1beta1.DRAPlugin``, over a ``Driver``.

Mirrors the Go kubeletplugin library (docs/data-path.md §5, docs/compatibility.md §2.7):

- Prepare first GETs every claim (concurrently here) and fails the *whole call* if one cannot be
  read, is not allocated, or was replaced (UID mismatch) — the kubelet retries the pod later. A claim
  that does not decode (``MalformedClaimError``) fails alone, with that permanent error. Then
  the driver prepares; one response entry per result, ``request_names`` with any ``/subrequest``
  suffix stripped, ``share_id`` set only when the driver reported one.
- Unprepare makes no API calls.
- An empty request answers at once without reaching the driver (the plugin's health check sends one).
- Errors of the whole call are gRPC ``UNKNOWN`` with the message, as Go handler errors are.
- v1beta1 is served by converting to v1 and back; v1beta1 has no ``share_id``.

No library-level serialisation: concurrent calls reach the driver concurrently (upstream sets
``Serialize(false)``; a driver serialises per claim itself, the IMEX driver with ``pu.lock``).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping
from typing import Any, TypeVar

import structlog
from grpclib.const import Status
from grpclib.exceptions import GRPCError
from grpclib.server import Stream

from imexdra.dra._pb import dra_v1_grpc as v1_grpc
from imexdra.dra._pb import dra_v1_pb2 as v1
from imexdra.dra._pb import dra_v1beta1_grpc as v1beta1_grpc
from imexdra.dra._pb import dra_v1beta1_pb2 as v1beta1
from imexdra.dra.driver import ClaimGetter, Driver, PrepareResult
from imexdra.dra.grpcserver import unary_request
from imexdra.dra.resourceclaim import ClaimRef, MalformedClaimError, ResourceClaim

_log = structlog.get_logger(__name__)

_R = TypeVar("_R")

V1_SERVICE = "v1.DRAPlugin"
V1BETA1_SERVICE = "v1beta1.DRAPlugin"


class RequestError(Exception):
    """The whole gRPC call fails (reported to the kubelet as status UNKNOWN)."""


class DraService:
    """The v1 semantics, independent of gRPC plumbing (the servicers below adapt it)."""

    def __init__(self, driver: Driver, get_claim: ClaimGetter) -> None:
        self._driver = driver
        self._get_claim = get_claim
        self._request_ids = itertools.count(1)

    async def prepare(self, request: v1.NodePrepareResourcesRequest) -> v1.NodePrepareResourcesResponse:
        """NodePrepareResources. Raises ``RequestError`` for failures of the whole call."""
        log = _log.bind(request_id=next(self._request_ids), method="NodePrepareResources")
        if not request.claims:
            return v1.NodePrepareResourcesResponse()
        refs = [ClaimRef(c.namespace, c.name, c.uid) for c in request.claims]
        log.debug("Request received", claims=[str(ref) for ref in refs])
        fetched = await asyncio.gather(*(self._fetch(ref) for ref in refs), return_exceptions=True)
        claims: list[ResourceClaim] = []
        malformed: dict[str, PrepareResult] = {}
        for ref, claim in zip(refs, fetched, strict=True):
            if isinstance(claim, MalformedClaimError):
                # Permanent for this claim alone, as any other bad input of one claim is.
                log.error("Malformed ResourceClaim", claim=str(ref), error=str(claim))
                malformed[ref.uid] = PrepareResult(error=claim)
            elif isinstance(claim, BaseException):
                raise RequestError(f"get resource claims: {claim}") from claim
            else:
                claims.append(claim)
        try:
            results = {**(await self._driver.prepare(claims) if claims else {}), **malformed}
        except Exception as error:
            raise RequestError(f"prepare resource claims: {error}") from error
        response = v1.NodePrepareResourcesResponse()
        for uid, result in _requested_only(results, refs, log).items():
            entry = response.claims[uid]
            if result.error is not None:
                entry.error = str(result.error)
                continue
            for device in result.devices:
                out = entry.devices.add(
                    request_names=[name.split("/", 1)[0] for name in device.requests],
                    pool_name=device.pool_name,
                    device_name=device.device_name,
                    cdi_device_ids=list(device.cdi_device_ids),
                )
                if device.share_id is not None:
                    out.share_id = device.share_id
        log.debug("Response sent", claims={uid: e.error or "ok" for uid, e in response.claims.items()})
        return response

    async def unprepare(self, request: v1.NodeUnprepareResourcesRequest) -> v1.NodeUnprepareResourcesResponse:
        """NodeUnprepareResources. Raises ``RequestError`` for failures of the whole call."""
        log = _log.bind(request_id=next(self._request_ids), method="NodeUnprepareResources")
        if not request.claims:
            return v1.NodeUnprepareResourcesResponse()
        refs = [ClaimRef(c.namespace, c.name, c.uid) for c in request.claims]
        log.debug("Request received", claims=[str(ref) for ref in refs])
        try:
            results = await self._driver.unprepare(refs)
        except Exception as error:
            raise RequestError(f"unprepare resource claims: {error}") from error
        response = v1.NodeUnprepareResourcesResponse()
        for uid, result in _requested_only(results, refs, log).items():
            response.claims[uid].error = str(result.error) if result.error is not None else ""
        log.debug("Response sent", claims={uid: e.error or "ok" for uid, e in response.claims.items()})
        return response

    async def _fetch(self, ref: ClaimRef) -> ResourceClaim | MalformedClaimError:
        where = f"{ref.namespace}/{ref.name}"
        try:
            claim = await self._get_claim(ref.namespace, ref.name)
        except MalformedClaimError as error:
            return MalformedClaimError(f"retrieve claim {where}: {error}")
        except Exception as error:
            raise RequestError(f"retrieve claim {where}: {error}") from error
        if claim.ref.uid != ref.uid:
            raise RequestError(f"claim {where} got replaced")
        if claim.status.allocation is None:
            raise RequestError(f"claim {where} not allocated")
        return claim


def _requested_only(results: Mapping[str, _R], refs: list[ClaimRef], log: Any) -> dict[str, _R]:
    wanted = {ref.uid for ref in refs}
    unexpected = sorted(set(results) - wanted)
    if unexpected:
        log.warning("Driver returned results for claims not in the request", claims=unexpected)
    return {uid: result for uid, result in results.items() if uid in wanted}


class V1Servicer(v1_grpc.DRAPluginBase):
    """``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin``."""

    def __init__(self, service: DraService) -> None:
        self._service = service

    async def NodePrepareResources(  # noqa: N802 - gRPC method name
        self, stream: Stream[v1.NodePrepareResourcesRequest, v1.NodePrepareResourcesResponse]
    ) -> None:
        """Prepare claims."""
        await stream.send_message(await self.prepare(await unary_request(stream)))

    async def NodeUnprepareResources(  # noqa: N802 - gRPC method name
        self, stream: Stream[v1.NodeUnprepareResourcesRequest, v1.NodeUnprepareResourcesResponse]
    ) -> None:
        """Unprepare claims."""
        await stream.send_message(await self.unprepare(await unary_request(stream)))

    async def prepare(self, request: v1.NodePrepareResourcesRequest) -> v1.NodePrepareResourcesResponse:
        """``DraService.prepare`` with a failure of the whole call as gRPC ``UNKNOWN``."""
        try:
            return await self._service.prepare(request)
        except RequestError as error:
            raise GRPCError(Status.UNKNOWN, str(error)) from error

    async def unprepare(self, request: v1.NodeUnprepareResourcesRequest) -> v1.NodeUnprepareResourcesResponse:
        """``DraService.unprepare`` with a failure of the whole call as gRPC ``UNKNOWN``."""
        try:
            return await self._service.unprepare(request)
        except RequestError as error:
            raise GRPCError(Status.UNKNOWN, str(error)) from error


class V1Beta1Servicer(v1beta1_grpc.DRAPluginBase):
    """``k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin``: converted to v1 and back (share_id dropped)."""

    def __init__(self, v1_servicer: V1Servicer) -> None:
        self._v1 = v1_servicer

    async def NodePrepareResources(  # noqa: N802 - gRPC method name
        self, stream: Stream[v1beta1.NodePrepareResourcesRequest, v1beta1.NodePrepareResourcesResponse]
    ) -> None:
        """Prepare claims."""
        request = await unary_request(stream)
        response = await self._v1.prepare(
            v1.NodePrepareResourcesRequest(claims=[_claim_to_v1(c) for c in request.claims])
        )
        out = v1beta1.NodePrepareResourcesResponse()
        for uid, entry in response.claims.items():
            converted = out.claims[uid]
            converted.error = entry.error
            for device in entry.devices:
                converted.devices.add(
                    request_names=list(device.request_names),
                    pool_name=device.pool_name,
                    device_name=device.device_name,
                    cdi_device_ids=list(device.cdi_device_ids),
                )
        await stream.send_message(out)

    async def NodeUnprepareResources(  # noqa: N802 - gRPC method name
        self, stream: Stream[v1beta1.NodeUnprepareResourcesRequest, v1beta1.NodeUnprepareResourcesResponse]
    ) -> None:
        """Unprepare claims."""
        request = await unary_request(stream)
        response = await self._v1.unprepare(
            v1.NodeUnprepareResourcesRequest(claims=[_claim_to_v1(c) for c in request.claims])
        )
        out = v1beta1.NodeUnprepareResourcesResponse()
        for uid, entry in response.claims.items():
            out.claims[uid].error = entry.error
        await stream.send_message(out)


def _claim_to_v1(claim: v1beta1.Claim) -> v1.Claim:
    return v1.Claim(namespace=claim.namespace, name=claim.name, uid=claim.uid)


def dra_handlers(service: DraService) -> tuple[list[V1Servicer | V1Beta1Servicer], list[str]]:
    """Both DRA services over ``service``, and their names in preference order (for ``GetInfo``)."""
    v1_servicer = V1Servicer(service)
    return [v1_servicer, V1Beta1Servicer(v1_servicer)], [V1_SERVICE, V1BETA1_SERVICE]
