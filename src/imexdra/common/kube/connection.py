"""A component's connection to the API server: the one place that builds its clients.

:func:`connect` resolves the kubeconfig once (``common.kube.load_config``: a path, ``$KUBECONFIG`` or the
in-cluster service account), its TLS context (``common.kube.tls_context``), its credentials
(``common.credentials``: tokens, token files, exec plugins with tokens or client certificates, the oidc
auth-provider), its proxy (``common.proxy``: the cluster's ``proxy-url``, else the environment's;
http, https and socks5) and the client-side ``--kube-api-qps``/``--kube-api-burst`` limit with its
``rest_client_*`` metrics. The two clients it hands out share all of these, so a component has one QPS
bucket, one TLS context and one credential, whichever it uses (docs/architecture.md §6):

- :meth:`Connection.transport` — the lean keep-alive transport (``common.transport``) for hot paths:
  the controller's writes, the plugin's claim reads and node label writes.
- :meth:`Connection.client` — lightkube's typed ``AsyncClient`` for everything else (informers, Events,
  Leases, ResourceSlices, the CLI), wrapped in a transport that applies the same QPS limit and metrics.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
from lightkube import AsyncClient, SingleConfig
from lightkube.config.models import User

from imexdra.common.kube.client import DEFAULT_TIMEOUT, http_client, load_config, tls_context
from imexdra.common.kube.credentials import Credentials, CredentialsAuth
from imexdra.common.kube.oidc import KubeconfigUser
from imexdra.common.kube.proxy import httpx_proxy, proxy_url
from imexdra.common.kube.restmetrics import RestClientMetrics, server_host
from imexdra.common.kube.transport import Transport
from imexdra.common.machinery.ratelimit import TokenBucket


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

    def client(self, *, field_manager: str, timeout: httpx2.Timeout = DEFAULT_TIMEOUT) -> AsyncClient:
        """Lightkube's typed client; ``field_manager`` is recorded as the writer of every field it sets."""
        # TLS, proxy and credentials are the connection's: lightkube gets an httpx transport built on
        # them and no user of its own, so it neither refuses an exec or auth-provider user nor adds a
        # second Authorization header; trust_env=False keeps httpx from proxying on its own.
        client = AsyncClient(
            config=self.config._replace(user=User()),
            timeout=timeout,
            field_manager=field_manager,
            lazy=False,
            trust_env=False,
            transport=_MeteredTransport(self._httpx_transport, self.metrics, self.credentials),
        )
        http_client(client).auth = CredentialsAuth(self.credentials)
        return client

    def _httpx_transport(self) -> httpx2.AsyncBaseTransport:
        return httpx2.AsyncHTTPTransport(
            verify=self.tls if self.tls is not None else True,
            proxy=httpx_proxy(self.proxy) if self.proxy is not None else None,
            trust_env=False,
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
    timeout: httpx2.Timeout = DEFAULT_TIMEOUT,
) -> AsyncClient:
    """A lightkube client on a connection of its own (for a process that needs only the typed client)."""
    return connect(kubeconfig, context=context, qps=qps, burst=burst).client(
        field_manager=field_manager, timeout=timeout
    )


class _CountingStream(httpx2.AsyncByteStream):
    """A response body that reports its size once it is read to the end or closed."""

    def __init__(self, stream: httpx2.AsyncByteStream, done: Callable[[int], None]) -> None:
        self._stream = stream
        self._done: Callable[[int], None] | None = done
        self._size = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._stream:
            self._size += len(chunk)
            yield chunk

    async def aclose(self) -> None:
        if self._done is not None:
            done, self._done = self._done, None
            done(self._size)
        await self._stream.aclose()


class _MeteredTransport(httpx2.AsyncBaseTransport):
    """httpx's transport wrapped: the client-side QPS limit and the ``rest_client_*`` metrics.

    A transport rather than event hooks: hooks never see a request that got no response, and run before
    the body is read, so neither ``code="<error>"`` nor client-go's duration (body included) is possible.
    """

    def __init__(
        self,
        make: Callable[[], httpx2.AsyncBaseTransport],
        metrics: RestClientMetrics,
        credentials: Credentials,
    ) -> None:
        self._make = make
        self._inner = make()
        self._metrics = metrics
        self._credentials = credentials
        self._generation = credentials.certificate_generation

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        if self._credentials.certificate_generation != self._generation:
            # An exec plugin's new client certificate: connections made with the old one are closed
            # (watches on them end and are resumed by their informers), as client-go does.
            self._generation = self._credentials.certificate_generation
            stale, self._inner = self._inner, self._make()
            await stale.aclose()
        method = request.method
        # Watches are neither throttled nor timed: they stay open as long as the server allows.
        watch = request.url.params.get("watch") == "true"
        started = time.monotonic()
        if not watch:
            await self._metrics.throttle(method)
        sent = int(request.headers.get("content-length") or 0)
        try:
            response = await self._inner.handle_async_request(request)
        except Exception:  # no response: refused, reset, timed out (cancellation is not counted)
            self._metrics.result(method, None)
            if not watch:
                self._metrics.completed(method, time.monotonic() - started, sent=sent, received=None)
            raise
        self._metrics.result(method, response.status_code)
        if not watch and isinstance(response.stream, httpx2.AsyncByteStream):

            def done(received: int) -> None:
                self._metrics.completed(method, time.monotonic() - started, sent=sent, received=received)

            response.stream = _CountingStream(response.stream, done)
        return response

    async def __aenter__(self) -> _MeteredTransport:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self._inner.__aexit__(*exc_info)

    async def aclose(self) -> None:
        await self._inner.aclose()
