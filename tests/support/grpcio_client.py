"""grpcio client stubs for the plugin's services, built from the generated message descriptors.

The plugin serves on grpclib; tests call it through grpcio, a second, independent gRPC
implementation (the C core, as the kubelet's grpc-go is independent of the server), so a wire
detail both ends of one library would agree on wrongly still shows. grpcio is a test dependency only.
"""

from __future__ import annotations

from types import ModuleType, SimpleNamespace
from typing import Any

import grpc

from imexdra.dra._pb import dra_health_v1alpha1_pb2, dra_v1_pb2, dra_v1beta1_pb2, pluginregistration_v1_pb2


def stub(channel: grpc.aio.Channel, module: ModuleType, service: str) -> Any:
    """An object with one awaitable unary-unary callable per method of ``service`` in ``module``."""
    descriptor = module.DESCRIPTOR.services_by_name[service]
    methods = {}
    for method in descriptor.methods:
        request = getattr(module, method.input_type.name)
        response = getattr(module, method.output_type.name)
        methods[method.name] = channel.unary_unary(
            f"/{descriptor.full_name}/{method.name}",
            request_serializer=request.SerializeToString,
            response_deserializer=response.FromString,
        )
    return SimpleNamespace(**methods)


def registration_stub(channel: grpc.aio.Channel) -> Any:
    """``pluginregistration.Registration``."""
    return stub(channel, pluginregistration_v1_pb2, "Registration")


def dra_v1_stub(channel: grpc.aio.Channel) -> Any:
    """``k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin``."""
    return stub(channel, dra_v1_pb2, "DRAPlugin")


def dra_v1beta1_stub(channel: grpc.aio.Channel) -> Any:
    """``k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin``."""
    return stub(channel, dra_v1beta1_pb2, "DRAPlugin")


def resource_health_watch(channel: grpc.aio.Channel) -> Any:
    """``v1alpha1.DRAResourceHealth/NodeWatchResources``: a callable returning the response stream."""
    return channel.unary_stream(
        "/v1alpha1.DRAResourceHealth/NodeWatchResources",
        request_serializer=dra_health_v1alpha1_pb2.NodeWatchResourcesRequest.SerializeToString,
        response_deserializer=dra_health_v1alpha1_pb2.NodeWatchResourcesResponse.FromString,
    )
