"""Generated gRPC stubs for the kubelet plugin protocols (make protos); do not edit."""
