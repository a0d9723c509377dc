"""The oidc auth-provider: its id-token, refreshed at a local identity provider and written back."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import json
import pathlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from urllib.parse import parse_qs

import pytest
import yaml

from imexdra.common.errors import ConfigError
from imexdra.common.kube.credentials import Credentials
from imexdra.common.kube.kubeconfig import User
from imexdra.common.kube.oidc import KubeconfigUser, OidcRefreshError


def jwt(expires: dt.datetime, subject: str = "me") -> str:
    """An unsigned JWT with ``exp`` and ``sub`` (the client only reads ``exp``)."""

    def part(value: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part({'alg': 'none'})}.{part({'exp': int(expires.timestamp()), 'sub': subject})}.sig"


def in_an_hour(subject: str = "me") -> str:
    return jwt(dt.datetime.now(dt.UTC) + dt.timedelta(hours=1), subject)


def an_hour_ago() -> str:
    return jwt(dt.datetime.now(dt.UTC) - dt.timedelta(hours=1))


@dataclass
class Issuer:
    """A local identity provider: discovery and a token endpoint that records each refresh form."""

    url: str = ""
    forms: list[dict[str, str]] = field(default_factory=list)
    refuse: bool = False

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        request_line, *lines = head.split("\r\n")
        headers = {k.lower(): v for k, _, v in (line.partition(": ") for line in lines if line)}
        body = await reader.readexactly(int(headers.get("content-length", "0")))
        path = request_line.split(" ")[1]
        status, answer = 404, {}
        if path == "/.well-known/openid-configuration":
            status, answer = 200, {"issuer": self.url, "token_endpoint": f"{self.url}/token"}
        elif path == "/token":
            form = {k: v[0] for k, v in parse_qs(body.decode()).items()}
            self.forms.append(form)
            if self.refuse:
                status, answer = 400, {"error": "invalid_grant", "error_description": "token revoked"}
            else:
                n = len(self.forms)
                status, answer = 200, {"id_token": in_an_hour(f"refresh-{n}"), "refresh_token": f"r{n + 1}"}
        payload = json.dumps(answer).encode()
        writer.write(
            f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
            "Connection: close\r\n\r\n".encode()
            + payload
        )
        await writer.drain()
        writer.close()


@pytest.fixture
async def issuer() -> AsyncIterator[Issuer]:
    provider = Issuer()
    server = await asyncio.start_server(provider.handle, "127.0.0.1", 0)
    provider.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    yield provider
    server.close()


def kubeconfig(tmp_path: pathlib.Path, provider: dict[str, object]) -> KubeconfigUser:
    """A kubeconfig file whose user ``dev`` has ``provider`` as its auth-provider."""
    path = tmp_path / "config"
    path.write_text(yaml.safe_dump({"users": [{"name": "dev", "user": {"auth-provider": provider}}]}))
    path.chmod(0o640)
    return KubeconfigUser(path, "dev")


def written_config(origin: KubeconfigUser) -> dict[str, str]:
    config: dict[str, str] = yaml.safe_load(origin.path.read_text())["users"][0]["user"]["auth-provider"][
        "config"
    ]
    return config


def oidc(issuer: Issuer, id_token: str) -> dict[str, object]:
    return {
        "name": "oidc",
        "config": {
            "id-token": id_token,
            "refresh-token": "r1",
            "idp-issuer-url": issuer.url,
            "client-id": "kubernetes",
            "client-secret": "s3cret",
        },
    }


async def test_an_expired_id_token_is_refreshed_and_written_back(
    issuer: Issuer, tmp_path: pathlib.Path
) -> None:
    """The refresh-token grant goes to the discovered token endpoint with the client's id and secret;
    the new id-token is sent and both new tokens replace the old ones in the kubeconfig file."""
    provider = oidc(issuer, an_hour_ago())
    origin = kubeconfig(tmp_path, provider)
    creds = Credentials(User(auth_provider=provider), str, origin=origin)
    assert creds.refreshable
    header = await creds.header()
    assert issuer.forms == [
        {
            "grant_type": "refresh_token",
            "refresh_token": "r1",
            "client_id": "kubernetes",
            "client_secret": "s3cret",
        }
    ]
    written = written_config(origin)
    assert header == f"Bearer {written['id-token']}"
    assert json.loads(base64.urlsafe_b64decode(written["id-token"].split(".")[1] + "==").decode())["sub"] == (
        "refresh-1"
    )
    assert written["refresh-token"] == "r2"
    assert written["idp-issuer-url"] == issuer.url  # the rest of the entry is kept
    assert origin.path.stat().st_mode & 0o777 == 0o640
    assert await creds.header() == header  # valid for an hour: no second refresh
    assert len(issuer.forms) == 1


async def test_a_refused_token_is_refreshed_even_before_it_expires(
    issuer: Issuer, tmp_path: pathlib.Path
) -> None:
    """After a 401 (invalidate) the next header comes from a refresh with the newest refresh-token."""
    valid = in_an_hour()
    creds = Credentials(User(auth_provider=oidc(issuer, valid)), str)
    assert await creds.header() == f"Bearer {valid}"
    assert issuer.forms == []
    creds.invalidate()
    first = await creds.header()
    creds.invalidate()
    second = await creds.header()
    assert first != second != f"Bearer {valid}"
    assert [form["refresh_token"] for form in issuer.forms] == ["r1", "r2"]


async def test_a_refused_refresh_says_to_log_in_again(issuer: Issuer, tmp_path: pathlib.Path) -> None:
    """The issuer's 400 (a revoked refresh-token) is a configuration error with its answer and advice;
    an expired id-token without a refresh-token fails at start."""
    issuer.refuse = True
    creds = Credentials(User(auth_provider=oidc(issuer, an_hour_ago())), str)
    with pytest.raises(ConfigError, match=r"refused the refresh \(400: .*invalid_grant.*log in again"):
        await creds.header()
    bare = {"name": "oidc", "config": {"id-token": an_hour_ago()}}
    with pytest.raises(ConfigError, match=r"expired at .* no refresh-token"):
        Credentials(User(auth_provider=bare), str)


async def test_an_unreachable_issuer_is_retryable(tmp_path: pathlib.Path) -> None:
    """No identity provider listening: a retryable error naming the discovery URL."""
    provider = {
        "name": "oidc",
        "config": {"refresh-token": "r1", "idp-issuer-url": "http://127.0.0.1:9", "client-id": "k"},
    }
    creds = Credentials(User(auth_provider=provider), str)
    with pytest.raises(OidcRefreshError, match="openid-configuration"):
        await creds.header()
