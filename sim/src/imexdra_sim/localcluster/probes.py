"""Probing the control plane's health endpoints over HTTPS (etcd's is plain HTTP on loopback)."""

from __future__ import annotations

import ssl
import urllib.request


def http_get(url: str, context: ssl.SSLContext | None = None) -> bytes:
    """GET ``url`` (2 s timeout) and return the body."""
    with urllib.request.urlopen(url, timeout=2, context=context) as response:  # noqa: S310 - fixed local URLs
        body: bytes = response.read()
        return body


def healthz_ok(url: str, context: ssl.SSLContext) -> bool:
    """Whether a component's ``/healthz`` answers ``ok``."""
    return http_get(url, context) == b"ok"


def insecure_context() -> ssl.SSLContext:
    """A TLS context that checks no certificate."""
    # kcm and scheduler serve healthz with self-signed certs; only liveness is checked here.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context
