"""Stand-ins for components the controller's integration tests cannot run for real.

Each does only what the real component would do.

- ``DaemonDevicePlugin`` stands in for the kubelet plugin's daemon side on a real kubelet: it publishes
  the ``daemon-0`` device in a ResourceSlice and answers NodePrepareResources for it, so the daemon
  pods the DaemonSet controller creates are scheduled, prepared and run (fakecri fakes the container
  and answers the exec probes with success, so they become Ready through the real probe path).
- ``publish_daemon_devices`` publishes ``imexdra_sim.builders.daemon_slice`` (the ResourceSlice the
  plugin would publish for a node's daemon device) with the DeviceClass, as a fresh plugin would.

The kubelets of API-only nodes are ``imexdra_sim.apinodes.FakeKubelet`` (the benchmarks use it too).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from grpclib.server import Stream

from imexdra.api.constants import DRIVER_NAME
from imexdra.dra._pb import dra_v1_pb2 as dra
from imexdra.dra.grpcserver import unary_request
from imexdra_sim.builders import daemon_device_class, daemon_slice
from imexdra_sim.localcluster.cluster import LocalCluster
from tests.integration.pluginharness import remove_slices
from tests.support.grpcserving import StandInPlugin
from tests.support.kubectl import apply


def publish_daemon_devices(
    cluster: LocalCluster, nodes: Sequence[str], node_uids: Mapping[str, str] | None = None
) -> None:
    """The daemon DeviceClass and each node's daemon slice, on nodes cleared of the driver's slices.

    An earlier module's real plugin may have left its pool on a node (under channel isolation, 16
    slices at a later generation); the scheduler reads only a pool's newest generation, so the
    stand-in's slice (generation 1) beside it would never be allocated from.
    """
    for node in nodes:
        remove_slices(cluster, node)
    apply(cluster, daemon_device_class(), *(daemon_slice(n, (node_uids or {}).get(n)) for n in nodes))


@dataclass
class DaemonDevicePlugin(StandInPlugin):
    """Registers as ``compute-domain.nvidia.com`` with one real kubelet and prepares daemon claims."""

    driver: ClassVar[str] = DRIVER_NAME

    prepared: list[str] = field(default_factory=list)

    async def NodePrepareResources(  # noqa: N802
        self, stream: Stream[dra.NodePrepareResourcesRequest, dra.NodePrepareResourcesResponse]
    ) -> None:
        request = await unary_request(stream)
        response = dra.NodePrepareResourcesResponse()
        for claim in request.claims:
            self.prepared.append(claim.uid)
            response.claims[claim.uid].devices.append(
                dra.Device(request_names=["daemon"], pool_name=self.node, device_name="daemon-0")
            )
        await stream.send_message(response)

    async def NodeUnprepareResources(  # noqa: N802
        self, stream: Stream[dra.NodeUnprepareResourcesRequest, dra.NodeUnprepareResourcesResponse]
    ) -> None:
        request = await unary_request(stream)
        response = dra.NodeUnprepareResourcesResponse()
        for claim in request.claims:
            response.claims[claim.uid].error = ""
        await stream.send_message(response)
