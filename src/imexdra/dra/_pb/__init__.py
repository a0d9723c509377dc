"""Generated protobuf messages and grpclib service stubs for the kubelet DRA and plugin-registration protocols (make protos); do not edit."""
