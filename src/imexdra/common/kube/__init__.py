"""The Kubernetes API client: connection, credentials, proxy, transport, rest-client metrics."""
