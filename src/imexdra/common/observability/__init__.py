"""Logging, klog verbosity, Prometheus metrics and the /metrics server, profiling."""
