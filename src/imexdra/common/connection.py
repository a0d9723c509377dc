"""A component's connection to the API server: the one place that builds its clients.

:func:`connect` resolves the kubeconfig once (``common.kube.load_config``: a path, ``$KUBECONFIG`` or the
in-cluster service account), its credentials (``common.credentials``: tokens, token files, exec and
auth-provider plugins), its proxy (the cluster's ``proxy-url``, else ``HTTPS_PROXY``/``HTTP_PROXY`` and
``NO_PROXY``; loopback is never proxied, as in Go's ``http.ProxyFromEnvironment``) and the client-side
``--kube-api-qps``/``--kube-api-burst`` limit with its ``rest_client_*`` metrics. The two clients it
hands out share all of these, so a component has one QPS bucket and one credential, whichever it uses
(docs/architecture.md §6):

- :meth:`Connection.transport` — the lean keep-alive transport (``common.transport``) for hot paths:
  the controller's writes, the plugin's claim reads and node label writes.
- :meth:`Connection.client` — lightkube's typed ``AsyncClient`` for everything else (informers, Events,
  Leases, ResourceSlices, the CLI), wrapped in a transport that applies the same QPS limit and metrics.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from ipaddress import ip_address, ip_network
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx2
import yaml
from lightkube import AsyncClient, SingleConfig
from lightkube.config.models import User

from imexdra.common.credentials import Credentials, CredentialsAuth
from imexdra.common.errors import ConfigError
from imexdra.common.kube import DEFAULT_TIMEOUT, http_client, load_config
from imexdra.common.ratelimit import TokenBucket
from imexdra.common.restmetrics import RestClientMetrics, server_host
from imexdra.common.transport import Transport


@dataclass(frozen=True, slots=True)
class Connection:
    """What every client of one component shares: endpoint and TLS, credentials, proxy, QPS bucket."""

    config: SingleConfig
    credentials: Credentials
    proxy: str | None
    metrics: RestClientMetrics

    def transport(self, *, user_agent: str, timeout: float = 30.0) -> Transport:
        """A lean keep-alive transport (close it with ``Transport.close``).

        ``user_agent`` names the component in the API server's audit log and request metrics.
        """
        return Transport(
            self.config,
            credentials=self.credentials,
            metrics=self.metrics,
            proxy=self.proxy,
            timeout=timeout,
            user_agent=user_agent,
        )

    def client(self, *, field_manager: str, timeout: httpx2.Timeout = DEFAULT_TIMEOUT) -> AsyncClient:
        """Lightkube's typed client; ``field_manager`` is recorded as the writer of every field it sets."""
        # The credentials are ours (CredentialsAuth below); lightkube only gets what TLS needs, so it
        # neither refuses an exec or auth-provider user nor adds a second Authorization header.
        user = self.config.user or User()
        tls_only = User(
            client_cert=user.client_cert,
            client_cert_data=user.client_cert_data,
            client_key=user.client_key,
            client_key_data=user.client_key_data,
        )
        client = AsyncClient(
            config=self.config._replace(user=tls_only),
            timeout=timeout,
            field_manager=field_manager,
            lazy=False,
            proxy=self.proxy,
        )
        http = http_client(client)
        http.auth = CredentialsAuth(self.credentials)
        # The proxy is resolved here, once, for both clients: without one, drop the mounts httpx made
        # from the environment itself (it would proxy loopback, and knows no NO_PROXY CIDRs). Its
        # environment is otherwise kept, for SSL_CERT_FILE/SSL_CERT_DIR as the transport honours them.
        mounts = http._mounts if self.proxy is not None else {}
        # httpx keeps the direct transport and one per proxy mount; meter them all.
        http._transport = _MeteredTransport(http._transport, self.metrics)
        http._mounts = {
            pattern: None if transport is None else _MeteredTransport(transport, self.metrics)
            for pattern, transport in mounts.items()
        }
        return client


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
    return Connection(
        config=config,
        credentials=Credentials(config.user, config.abs_file),
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


def proxy_url(config: SingleConfig) -> str | None:
    """The HTTP proxy to reach ``config``'s server through, or None for a direct connection."""
    explicit = _cluster_field(config, "proxy-url")
    url = urlsplit(config.cluster.server)
    host = url.hostname or ""
    if explicit:
        chosen: str | None = explicit
    elif _is_loopback(host):
        chosen = None
    else:
        proxies = urllib.request.getproxies_environment()  # lower case wins, as in Go
        chosen = None if _bypassed(host, url.port, proxies.get("no", "")) else proxies.get(url.scheme)
    if chosen and urlsplit(chosen).scheme != "http":
        raise ConfigError(
            f"proxy {chosen!r}: only http:// proxies (HTTP CONNECT) are supported; "
            "reach an https or socks proxy through a local HTTP CONNECT proxy",
            field="kubeconfig",
        )
    return chosen or None


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ip_address(host).is_loopback
    except ValueError:
        return False


def _bypassed(host: str, port: int | None, no_proxy: str) -> bool:
    """Whether ``NO_PROXY`` exempts ``host``: ``*``, an IP, a CIDR, or a domain and its subdomains."""
    for raw in no_proxy.split(","):
        entry = raw.strip().lower()
        if not entry:
            continue
        if entry == "*":
            return True
        if "/" in entry:
            try:
                if ip_address(host) in ip_network(entry, strict=False):
                    return True
            except ValueError:
                pass
            continue
        name, _, entry_port = entry.rpartition(":") if entry.count(":") == 1 else (entry, "", "")
        if entry_port and entry_port != str(port):
            continue
        name = name.strip("[]").lstrip("*").lstrip(".")
        if host.lower() == name or host.lower().endswith(f".{name}"):
            return True
    return False


def _cluster_field(config: SingleConfig, key: str) -> str | None:
    """A field of the context's cluster that lightkube's model does not keep (e.g. ``proxy-url``)."""
    if config.fname is None:
        return None
    try:
        raw = yaml.safe_load(Path(config.fname).read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None  # load_config has read it already; a file changed since is read again next start
    for entry in raw.get("clusters") or ():
        if isinstance(entry, dict) and entry.get("name") == config.context.cluster:
            value = (entry.get("cluster") or {}).get(key)
            return str(value) if value else None
    return None


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

    def __init__(self, inner: httpx2.AsyncBaseTransport, metrics: RestClientMetrics) -> None:
        self._inner = inner
        self._metrics = metrics

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
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
