"""A minimal test-only DRA driver: real plugin registration and DRA v1 gRPC on a node's kubelet sockets.

It exists to prove the cluster's DRA path end to end independently of imexdra's own plugin: the
kubelet discovers it, the scheduler allocates its device, the kubelet calls NodePrepareResources and
passes the returned CDI ID to the runtime, and NodeUnprepareResources follows pod deletion.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from grpclib.server import Stream

from imexdra.dra._pb import dra_v1_pb2 as dra
from imexdra.dra.grpcserver import unary_request
from tests.support.grpcserving import StandInPlugin

DRIVER = "test.imexdra.dev"


def cdi_id(device: str) -> str:
    """The CDI device ID this driver hands out for ``device``."""
    return f"{DRIVER}/test={device}"


@dataclass
class TestDriver(StandInPlugin):
    """Serves one node; records every call it receives."""

    __test__ = False  # a helper, not a test class
    driver: ClassVar[str] = DRIVER

    device: str = "dev-0"
    prepared: list[str] = field(default_factory=list)
    unprepared: list[str] = field(default_factory=list)

    async def NodePrepareResources(  # noqa: N802
        self, stream: Stream[dra.NodePrepareResourcesRequest, dra.NodePrepareResourcesResponse]
    ) -> None:
        """Prepare every claim with our single device and its CDI ID."""
        request = await unary_request(stream)
        response = dra.NodePrepareResourcesResponse()
        for claim in request.claims:
            self.prepared.append(claim.uid)
            response.claims[claim.uid].devices.append(
                dra.Device(
                    request_names=["dev"],
                    pool_name=self.node,
                    device_name=self.device,
                    cdi_device_ids=[cdi_id(self.device)],
                )
            )
        await stream.send_message(response)

    async def NodeUnprepareResources(  # noqa: N802
        self, stream: Stream[dra.NodeUnprepareResourcesRequest, dra.NodeUnprepareResourcesResponse]
    ) -> None:
        """Record the unprepare; nothing to undo."""
        request = await unary_request(stream)
        response = dra.NodeUnprepareResourcesResponse()
        for claim in request.claims:
            self.unprepared.append(claim.uid)
            response.claims[claim.uid].error = ""
        await stream.send_message(response)
