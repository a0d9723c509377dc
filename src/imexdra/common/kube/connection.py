"""A component's connection to the API server: the one place that builds its clients.

:func:`connect` resolves the kubeconfig once (``common.kube.client.load_config``: a path,
``$KUBECONFIG`` or the in-cluster service account), its TLS context (``common.kube.client.tls_context``),
its credentials (``common.kube.credentials``: tokens, token files, exec plugins with tokens or client
certificates, the oidc auth-provider), its proxy (``common.kube.proxy``: the cluster's ``proxy-url``,
else the environment's; http, https and socks5) and the client-side ``--kube-api-qps``/``--kube-api-burst``
limit with its ``rest_client_*`` metrics. :meth:`Connection.kube` hands out the typed client
(``common.kube.kubeclient.KubeClient``) on one lean transport (``common.kube.transport``) built on all of
them, watches included, so a component has one QPS bucket, one TLS context and one credential
(docs/kube-client.md). :meth:`Connection.transport` is that transport alone, for benchmarks and tests
of the wire.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

from imexdra.common.kube.client import load_config, tls_context
from imexdra.common.kube.credentials import Credentials
from imexdra.common.kube.kubeclient import KubeClient
from imexdra.common.kube.kubeconfig import SingleConfig
from imexdra.common.kube.oidc import KubeconfigUser
from imexdra.common.kube.proxy import proxy_url
from imexdra.common.kube.restmetrics import RestClientMetrics, server_host
from imexdra.common.kube.transport import Transport
from imexdra.common.pacing.ratelimit import TokenBucket


@dataclass(frozen=True, slots=True)
class Connection:
    """What every client of one component shares: endpoint, TLS, credentials, proxy, QPS bucket."""

    config: SingleConfig
    tls: ssl.SSLContext | None
    credentials: Credentials
    proxy: str | None
    metrics: RestClientMetrics

    def transport(self, *, user_agent: str, timeout: float = 30.0) -> Transport:
        """A lean keep-alive transport (close it with ``Transport.close``).

        ``user_agent`` names the component in the API server's audit log and request metrics.
        """
        return Transport(
            self.config,
            tls=self.tls,
            credentials=self.credentials,
            metrics=self.metrics,
            proxy=self.proxy,
            timeout=timeout,
            user_agent=user_agent,
        )

    def kube(self, *, field_manager: str, timeout: float = 30.0) -> KubeClient:
        """The typed client on a lean transport of its own; ``field_manager`` also names it as user agent."""
        return KubeClient(
            self.transport(user_agent=field_manager, timeout=timeout), field_manager=field_manager
        )


def connect(
    kubeconfig: Path | None = None, *, context: str | None = None, qps: float | None = None, burst: int = 10
) -> Connection:
    """Resolve one component's connection (see the module docstring).

    Args:
        kubeconfig: explicit kubeconfig file; otherwise ``$KUBECONFIG``, otherwise in-cluster.
        context: kubeconfig context to use instead of the current one.
        qps: client-side limit on non-watch requests per second (upstream's ``--kube-api-qps``); None = off.
        burst: requests allowed at once above ``qps`` (``--kube-api-burst``).

    """
    config = load_config(kubeconfig, context=context)
    bucket = TokenBucket(rate=qps, burst=burst) if qps else None
    tls = tls_context(config)
    user = config.context.user
    origin = KubeconfigUser(Path(config.fname), user) if config.fname and user else None
    return Connection(
        config=config,
        tls=tls,
        credentials=Credentials(config.user, config.abs_file, tls=tls, origin=origin),
        proxy=proxy_url(config),
        metrics=RestClientMetrics(server_host(config.cluster.server), bucket),
    )


def make_client(
    *,
    field_manager: str,
    kubeconfig: Path | None = None,
    context: str | None = None,
    qps: float | None = None,
    burst: int = 10,
    timeout: float = 30.0,
) -> KubeClient:
    """The typed client on a connection of its own (for a process that needs only one client)."""
    return connect(kubeconfig, context=context, qps=qps, burst=burst).kube(
        field_manager=field_manager, timeout=timeout
    )
