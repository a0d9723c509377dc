"""Which proxy a connection to the API server goes through, and how the lean transport dials it.

Resolution (:func:`proxy_url`), as client-go does: the kubeconfig cluster's ``proxy-url``, else
``HTTPS_PROXY``/``HTTP_PROXY`` unless ``NO_PROXY`` exempts the host (names and their subdomains, ``*``,
IPs, CIDRs, ``host:port``); a loopback server is never proxied from the environment, as in Go's
``http.ProxyFromEnvironment``. Schemes, as client-go accepts them: ``http`` and ``https`` (HTTP
``CONNECT``; an ``https`` proxy is itself reached over TLS, so the API server's TLS runs inside the
proxy's) and ``socks5``/``socks5h`` (the host name is sent to the proxy, which resolves it). Credentials
in the URL (``user:password@``) become ``Proxy-Authorization: Basic`` or SOCKS5 username/password.

An ``https`` proxy is verified against the system trust store (``SSL_CERT_FILE``/``SSL_CERT_DIR``
honoured), not the cluster's CA: the proxy is the network's, not the cluster's (client-go would use the
cluster's TLS settings; docs/architecture.md §6). SOCKS5 is spoken with ``socksio`` (sans-IO).
"""

from __future__ import annotations

import asyncio
import base64
import ssl
import urllib.request
from ipaddress import ip_address, ip_network
from urllib.parse import SplitResult, unquote, urlsplit

from imexdra.common.errors import ConfigError
from imexdra.common.kube.kubeconfig import SingleConfig

PROXY_SCHEMES = ("http", "https", "socks5", "socks5h")
_DEFAULT_PORTS = {"http": 80, "https": 443, "socks5": 1080, "socks5h": 1080}


def proxy_url(config: SingleConfig) -> str | None:
    """The proxy to reach ``config``'s server through, or None for a direct connection."""
    explicit = config.cluster.proxy_url
    url = urlsplit(config.cluster.server)
    host = url.hostname or ""
    if explicit:
        chosen: str | None = explicit
    elif _is_loopback(host):
        chosen = None
    else:
        proxies = urllib.request.getproxies_environment()  # lower case wins, as in Go
        chosen = None if _bypassed(host, url.port, proxies.get("no", "")) else proxies.get(url.scheme)
    if chosen and urlsplit(chosen).scheme not in PROXY_SCHEMES:
        raise ConfigError(
            f"proxy {chosen!r}: the scheme must be one of {', '.join(PROXY_SCHEMES)} "
            "(e.g. http://proxy.example.com:3128 or socks5://127.0.0.1:1080)",
            field="kubeconfig",
        )
    return chosen or None


async def dial(proxy: str, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A stream to ``host:port`` through ``proxy``, ready for the API server's TLS handshake."""
    url = urlsplit(proxy)
    scheme = url.scheme
    tls = _proxy_tls() if scheme == "https" else None
    reader, writer = await asyncio.open_connection(
        url.hostname,
        url.port or _DEFAULT_PORTS[scheme],
        ssl=tls,
        server_hostname=url.hostname if tls else None,
    )
    try:
        if scheme.startswith("socks5"):
            await _socks5_connect(reader, writer, url, host, port)
        else:
            await _http_connect(reader, writer, f"{host}:{port}", _basic_authorization(url))
    except BaseException:
        writer.close()
        raise
    return reader, writer


def _proxy_tls() -> ssl.SSLContext:
    return ssl.create_default_context()


def _basic_authorization(url: SplitResult) -> str | None:
    if url.username is None:
        return None
    secret = f"{unquote(url.username)}:{unquote(url.password or '')}"
    return f"Basic {base64.b64encode(secret.encode()).decode()}"


async def _http_connect(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, authority: str, authorization: str | None
) -> None:
    """Ask an HTTP proxy for a tunnel to ``authority`` (``CONNECT``); raise unless it answers 2xx."""
    lines = [f"CONNECT {authority} HTTP/1.1", f"Host: {authority}"]
    if authorization is not None:
        lines.append(f"Proxy-Authorization: {authorization}")
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    await writer.drain()
    status_line = await reader.readline()
    while (await reader.readline()) not in (b"\r\n", b"\n", b""):
        pass  # the proxy's headers
    parts = status_line.split(None, 2)
    if len(parts) < 2 or not parts[1].startswith(b"2"):
        raise ConnectionRefusedError(f"proxy refused CONNECT {authority}: {status_line.strip()[:120]!r}")


async def _socks5_connect(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, url: SplitResult, host: str, port: int
) -> None:
    """The SOCKS5 handshake (RFC 1928, username/password of RFC 1929 when the URL has them)."""
    # Imported only for a SOCKS proxy: most installs have none, and every process would pay its RSS.
    from socksio import ProtocolError, socks5

    connection = socks5.SOCKS5Connection()

    async def exchange(request: object) -> object:
        connection.send(request)
        writer.write(connection.data_to_send())
        await writer.drain()
        data = await reader.read(4096)
        if not data:
            raise ConnectionResetError("SOCKS5 proxy closed the connection")
        try:
            return connection.receive_data(data)
        except ProtocolError as error:
            raise ConnectionRefusedError(f"SOCKS5 proxy: {error}") from error

    wanted = (
        socks5.SOCKS5AuthMethod.NO_AUTH_REQUIRED
        if url.username is None
        else socks5.SOCKS5AuthMethod.USERNAME_PASSWORD
    )
    reply = await exchange(socks5.SOCKS5AuthMethodsRequest([wanted]))
    if not isinstance(reply, socks5.SOCKS5AuthReply) or reply.method != wanted:
        raise ConnectionRefusedError(f"SOCKS5 proxy refused authentication method {wanted.name}")
    if wanted == socks5.SOCKS5AuthMethod.USERNAME_PASSWORD:
        login = socks5.SOCKS5UsernamePasswordRequest(
            unquote(url.username or "").encode(), unquote(url.password or "").encode()
        )
        answer = await exchange(login)
        if not isinstance(answer, socks5.SOCKS5UsernamePasswordReply) or not answer.success:
            raise ConnectionRefusedError("SOCKS5 proxy refused the username and password")
    command = socks5.SOCKS5CommandRequest.from_address(socks5.SOCKS5Command.CONNECT, (host, port))
    connected = await exchange(command)
    succeeded = socks5.SOCKS5ReplyCode.SUCCEEDED
    if not isinstance(connected, socks5.SOCKS5Reply) or connected.reply_code != succeeded:
        code = getattr(connected, "reply_code", None)
        raise ConnectionRefusedError(
            f"SOCKS5 proxy could not connect to {host}:{port}: {getattr(code, 'name', code)}"
        )


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
